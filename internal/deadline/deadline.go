// Package deadline sets connection deadlines lazily: a wanted deadline
// is met by any deadline in [want, want+slack], so a busy connection
// re-arms its timer about once per slack instead of once per request.
// The host's fast engine and the proxy's upstream connections use it.
package deadline

import (
	"net"
	"time"
)

// Lazy is one direction's deadline of one connection. The zero Lazy is a
// read deadline with none set; set Write for the write deadline. A Lazy
// is owned by the goroutine that sets it.
type Lazy struct {
	at    time.Time
	Write bool // the write deadline, else the read deadline
}

// Set makes c's deadline want, or up to slack later: a deadline already
// in force within [want, want+slack] is kept.
func (d *Lazy) Set(c net.Conn, want time.Time, slack time.Duration) {
	if !d.at.IsZero() && !d.at.Before(want) && !d.at.After(want.Add(slack)) {
		return
	}
	d.at = want.Add(slack)
	if d.Write {
		_ = c.SetWriteDeadline(d.at)
	} else {
		_ = c.SetReadDeadline(d.at)
	}
}

// At returns the deadline in force (zero for none set through d).
func (d *Lazy) At() time.Time { return d.at }

// Forget records that the deadline was changed behind d's back (set
// directly on the connection): the next Set sets it whatever it wants.
func (d *Lazy) Forget() { d.at = time.Time{} }
