package console

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/bulwarkhq/bulwark/wire"
)

// View is the document GET /ui/api/status answers and every "snapshot"
// event carries.
type View struct {
	At     time.Time `json:"at"`
	Status Status    `json:"status"`
	// Rejected is the sum of every rejection counter.
	Rejected uint64 `json:"rejected"`
	// TopReasons and TopRoutes are the largest rejection counts by
	// (layer, reason) and by route (rejections without a route are not
	// ranked there), at most MaxTop each, largest first.
	TopReasons []ReasonCount `json:"top_reasons"`
	TopRoutes  []RouteCount  `json:"top_routes"`
	// Tables is the occupancy of each bounded table, by name.
	Tables []TableRow `json:"tables"`
	// Lists is the occupancy of the allow and deny lists.
	Lists map[string]Table `json:"lists"`
	// Reload reports whether the console can reload the configuration.
	Reload bool `json:"reload"`
	// Truncated reports that Status or Tables had more rows than the
	// console reads (MaxLayers, MaxRejections, MaxTables).
	Truncated bool `json:"truncated,omitempty"`
}

// ReasonCount is one row of View.TopReasons.
type ReasonCount struct {
	Layer  string `json:"layer"`
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// RouteCount is one row of View.TopRoutes.
type RouteCount struct {
	Route string `json:"route"`
	Count uint64 `json:"count"`
}

// TableRow is one row of View.Tables.
type TableRow struct {
	Name string `json:"name"`
	Table
}

// view computes the document at now.
func (c *console) view(now time.Time) View {
	st := c.cfg.Status()
	v := View{At: now.UTC(), Reload: c.cfg.Reload != nil, TopReasons: []ReasonCount{}, TopRoutes: []RouteCount{}, Tables: []TableRow{}}
	if len(st.Layers) > MaxLayers {
		st.Layers, v.Truncated = st.Layers[:MaxLayers], true
	}
	if st.Layers == nil {
		st.Layers = []Layer{}
	}
	rej := st.Rejections
	if len(rej) > MaxRejections {
		rej, v.Truncated = rej[:MaxRejections], true
	}
	st.Rejections = nil
	if len(st.Upstreams) > MaxUpstreams {
		st.Upstreams, v.Truncated = st.Upstreams[:MaxUpstreams], true
	}
	ups := make([]UpstreamHealth, len(st.Upstreams)) // a copy: Out is trimmed
	for i, u := range st.Upstreams {
		if len(u.Out) > MaxTargetsOut {
			u.Out, v.Truncated = u.Out[:MaxTargetsOut], true
		}
		if u.Out == nil {
			u.Out = []TargetOut{}
		}
		ups[i] = u
	}
	st.Upstreams = ups
	v.Status = st

	reasons := map[[2]string]uint64{}
	routes := map[string]uint64{}
	for _, x := range rej {
		v.Rejected += x.Count
		reasons[[2]string{x.Layer, x.Reason}] += x.Count
		if x.Route != "" {
			routes[x.Route] += x.Count
		}
	}
	for k, n := range reasons {
		if n > 0 {
			v.TopReasons = append(v.TopReasons, ReasonCount{Layer: k[0], Reason: k[1], Count: n})
		}
	}
	slices.SortFunc(v.TopReasons, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Reason, b.Reason))
	})
	v.TopReasons = v.TopReasons[:min(len(v.TopReasons), MaxTop)]
	for k, n := range routes {
		if n > 0 {
			v.TopRoutes = append(v.TopRoutes, RouteCount{Route: k, Count: n})
		}
	}
	slices.SortFunc(v.TopRoutes, func(a, b RouteCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Route, b.Route))
	})
	v.TopRoutes = v.TopRoutes[:min(len(v.TopRoutes), MaxTop)]

	if c.cfg.Tables != nil {
		for name, t := range c.cfg.Tables() {
			v.Tables = append(v.Tables, TableRow{Name: name, Table: t})
		}
		slices.SortFunc(v.Tables, func(a, b TableRow) int { return cmp.Compare(a.Name, b.Name) })
		if len(v.Tables) > MaxTables {
			v.Tables, v.Truncated = v.Tables[:MaxTables], true
		}
	}
	v.Lists = map[string]Table{
		"allow": {Len: c.cfg.Allow.Len(), Capacity: c.cfg.Allow.Capacity()},
		"deny":  {Len: c.cfg.Deny.Len(), Capacity: c.cfg.Deny.Capacity()},
	}
	return v
}

// snapCache shares one encoded snapshot between the streams that tick in
// the same second, so N watchers cost one computation per second.
type snapCache struct {
	mu   sync.Mutex
	at   time.Time
	seq  uint64
	body []byte
}

// get returns the encoded snapshot and its sequence number, computing it
// when the cached one is older than most of a period (or from a clock
// that moved backwards).
func (c *console) snapshot(now time.Time) ([]byte, uint64) {
	sc := &c.snap
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.body != nil && !now.Before(sc.at) && now.Sub(sc.at) < snapshotEvery*9/10 {
		return sc.body, sc.seq
	}
	b, err := json.Marshal(c.view(now))
	if err != nil {
		return nil, 0
	}
	sc.at, sc.body = now, b
	sc.seq++
	return sc.body, sc.seq
}

// Frames of the event stream. An event's data is one line of JSON
// (encoding/json never emits a raw newline).
const (
	streamRetry = "retry: 2000\n\n" // reconnect after 2 s
	logoutFrame = "event: logout\ndata: {}\n\n"
)

func appendSnapshot(b []byte, seq uint64, body []byte) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, "\nevent: snapshot\ndata: "...)
	b = append(b, body...)
	return append(b, "\n\n"...)
}

// events serves the live counters: a snapshot at once, then one per
// tick, until the stream's duration, its session or its request ends.
func (c *console) events(w http.ResponseWriter, r *http.Request, s *session) {
	if n := c.streams.Add(1); n > int32(c.cfg.MaxStreams) {
		c.streams.Add(-1)
		wire.Reject(w, r, wire.New(wire.CodeOverloaded))
		return
	}
	defer c.streams.Add(-1)

	rc := http.NewResponseController(w)
	// The stream outlives a server's usual write timeout; the request's
	// context still bounds it.
	_ = rc.SetWriteDeadline(time.Now().Add(c.cfg.StreamDuration + 10*time.Second))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	ticks, stop := c.newTicker(snapshotEvery)
	defer stop()
	maxTicks := int(c.cfg.StreamDuration / snapshotEvery)
	buf := make([]byte, 0, 4<<10)
	buf = append(buf, streamRetry...)
	ctx := r.Context()
	for n := 0; ; n++ {
		body, seq := c.snapshot(c.clock.Now())
		if body != nil {
			buf = appendSnapshot(buf, seq, body)
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		buf = buf[:0]
		if n >= maxTicks {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		if !c.sessions.valid(s, c.clock.Now()) {
			_, _ = w.Write([]byte(logoutFrame))
			_ = rc.Flush()
			return
		}
	}
}
