package gateway

import (
	"context"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bulwarkhq/bulwark/clock"
)

// accessLog writes one structured line per request (all, sampled) or per
// rejection: route, the layer that answered and why, status, duration,
// upstream, the request ID (X-Request-Id: the one the upstream was sent
// and the client got back), and a keyed client fingerprint, at most
// maxPerSecond lines a
// second (the rest dropped and counted). It never writes the address, the
// path, a username or a header value: an operator follows one client
// across lines by its fingerprint without learning who it is, and block
// it by that fingerprint (fingerprint.go: the grouped client address
// encrypted as one AES-128 block under the gateway's key, kept across
// restarts and shared by a cluster's replicas; without the key no address
// can be recovered or tested). An unknown client is "-".
//
// With the logger of NewLogger the line is formatted here and written to
// the log's writer in its format, at a fraction of slog's cost (one line
// per request is the point); any other logger gets it through slog.
type accessLog struct {
	mode   string // off, rejections, all
	sample float64
	max    int64
	out    *slog.Logger
	sink   *lineSink // NewLogger's writer, or nil: through out
	g      *Gateway  // its fingerprint key
	m      *metrics
	clock  clock.Clock // the per-second bound's time and the line's

	sec atomic.Int64 // the current second (Unix)
	n   atomic.Int64 // lines written in it
}

func (g *Gateway) newAccessLog(c AccessLog) *accessLog {
	return &accessLog{mode: c.Mode, sample: c.Sample, max: int64(c.MaxPerSecond), out: g.log, sink: directSink(g.log),
		g: g, m: g.metrics, clock: g.clock}
}

// lineBuf is one line's scratch space, pooled.
type lineBuf struct {
	b       []byte
	in, out [16]byte // the fingerprint's cipher blocks
	fp      [32]byte // its hex form
}

var linePool = sync.Pool{New: func() any { return &lineBuf{b: make([]byte, 0, 512)} }}

func (a *accessLog) log(rs *reqState, d time.Duration) {
	if a == nil || a.mode == "off" {
		return
	}
	rejected := rs.layer != "" || rs.shadowLayer != ""
	if !rejected && (a.mode == "rejections" || a.sample < 1 && rand.Float64() >= a.sample) {
		return
	}
	t := a.clock.Now()
	now := t.Unix()
	if s := a.sec.Load(); s != now && a.sec.CompareAndSwap(s, now) {
		a.n.Store(0)
	}
	if a.n.Add(1) > a.max {
		if a.m.on() {
			a.m.accessDropped.Inc()
		}
		return
	}
	lb := linePool.Get().(*lineBuf)
	defer linePool.Put(lb)
	fp := lb.fp[:1]
	fp[0] = '-'
	if rs.clientOK {
		// The scratch blocks live in the pooled buffer: passed to the
		// cipher's interface method, stack arrays would escape.
		lb.in = rs.group.As16()
		a.g.fingerprintBlock().Encrypt(lb.out[:], lb.in[:])
		hex.Encode(lb.fp[:], lb.out[:])
		fp = lb.fp[:]
	}
	upstream := ""
	if rs.route != nil && rs.layer == "" {
		upstream = rs.route.upstream
	}
	ms := float64(d.Microseconds()) / 1000
	if a.sink == nil {
		attrs := [11]slog.Attr{
			slog.String("route", rs.routeName()),
			slog.String("layer", rs.layer),
			slog.String("reason", rs.reason),
			slog.Int("status", rs.status),
			slog.Float64("duration_ms", ms),
			slog.String("client", string(fp)),
		}
		n := 6
		if rs.id != "" {
			attrs[n] = slog.String("request_id", strings.Clone(rs.id)) // (a handler may keep it)
			n++
		}
		if upstream != "" {
			attrs[n] = slog.String("upstream", upstream)
			n++
		}
		if rs.shadowLayer != "" {
			attrs[n] = slog.String("shadow_layer", rs.shadowLayer)
			attrs[n+1] = slog.String("shadow_reason", rs.shadowReason)
			n += 2
		}
		a.out.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs[:n]...)
		return
	}
	l := line{b: lb.b[:0], json: a.sink.json}
	l.start(t)
	l.str("route", rs.routeName())
	l.str("layer", rs.layer)
	l.str("reason", rs.reason)
	l.num("status", int64(rs.status))
	l.key("duration_ms")
	// As slog formats floats: encoding/json's form in JSON ('f' in this
	// range), 'g' in text.
	fmtc := byte('f')
	if !l.json {
		fmtc = 'g'
	}
	l.b = strconv.AppendFloat(l.b, ms, fmtc, -1, 64)
	l.str("client", unsafe.String(&fp[0], len(fp)))
	if rs.id != "" {
		l.str("request_id", rs.id)
	}
	if upstream != "" {
		l.str("upstream", upstream)
	}
	if rs.shadowLayer != "" {
		l.str("shadow_layer", rs.shadowLayer)
		l.str("shadow_reason", rs.shadowReason)
	}
	l.end()
	_, _ = a.sink.Write(l.b)
	lb.b = l.b
}

// line formats one access line as slog's JSON or text handler would: the
// values are configuration names and fixed words, escaped all the same.
type line struct {
	b    []byte
	json bool
}

func (l *line) start(t time.Time) {
	if l.json {
		l.b = append(l.b, `{"time":"`...)
		l.b = t.AppendFormat(l.b, time.RFC3339Nano)
		l.b = append(l.b, `","level":"INFO","msg":"access"`...)
		return
	}
	// slog's text time: RFC 3339 with exactly three fraction digits.
	l.b = append(l.b, "time="...)
	n := len(l.b)
	const prefixLen = len("2006-01-02T15:04:05.000")
	l.b = t.Truncate(time.Millisecond).Add(time.Millisecond/10).AppendFormat(l.b, time.RFC3339Nano)
	l.b = append(l.b[:n+prefixLen], l.b[n+prefixLen+1:]...)
	l.b = append(l.b, " level=INFO msg=access"...)
}

func (l *line) key(k string) {
	if l.json {
		l.b = append(l.b, ',', '"')
		l.b = append(l.b, k...)
		l.b = append(l.b, '"', ':')
		return
	}
	l.b = append(l.b, ' ')
	l.b = append(l.b, k...)
	l.b = append(l.b, '=')
}

func (l *line) str(k, v string) {
	l.key(k)
	if l.json {
		l.b = appendJSONString(l.b, v)
		return
	}
	if v == "" || needsQuote(v) {
		l.b = strconv.AppendQuote(l.b, v)
		return
	}
	l.b = append(l.b, v...)
}

func (l *line) num(k string, v int64) {
	l.key(k)
	l.b = strconv.AppendInt(l.b, v, 10)
}

func (l *line) end() {
	if l.json {
		l.b = append(l.b, '}')
	}
	l.b = append(l.b, '\n')
}

// appendJSONString quotes s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, `\u00`...)
			b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// needsQuote reports whether a text-format value must be quoted (as
// slog's text handler decides: spaces, quotes, '=' or anything not
// printable ASCII).
func needsQuote(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == '"' || c == '=' || c >= 0x7f {
			return true
		}
	}
	return false
}
