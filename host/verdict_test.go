package host_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
)

// verdictHandler declines /login to net/http and, on a loop, /block off
// the loop, each with a note naming the request; it records every call
// and the notes it is given back.
type verdictHandler struct {
	mu    sync.Mutex
	calls map[string]int    // ServeHTTP1 calls by path
	notes map[string][]any  // x.Note of every ServeHTTP1 call, by path
	seen  []string          // "path note" of every ServeHTTP call
	where map[string]string // "loop" or "goroutine" of the last call, by path
}

func newVerdictHandler() *verdictHandler {
	return &verdictHandler{calls: map[string]int{}, notes: map[string][]any{}, where: map[string]string{}}
}

func (v *verdictHandler) ServeHTTP1(x *h1.Exchange) host.Verdict {
	path := string(x.Req.Path())
	v.mu.Lock()
	v.calls[path]++
	v.notes[path] = append(v.notes[path], x.Note)
	v.where[path] = "goroutine"
	if x.Loop != nil {
		v.where[path] = "loop"
	}
	v.mu.Unlock()
	switch {
	case path == "/login":
		return host.NetHTTP("login note")
	case path == "/block" && x.Loop != nil:
		return host.OffLoop("block note")
	}
	_, _ = io.WriteString(x, "fast "+path)
	return host.Served
}

func (v *verdictHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	note, _ := host.NoteOf(r).(string)
	v.mu.Lock()
	v.seen = append(v.seen, r.URL.Path+" "+note)
	v.mu.Unlock()
	_, _ = io.WriteString(w, "nethttp "+r.URL.Path+" "+note)
}

// headCounter counts the heads the fast engine parsed and served, through
// the phases a connection guard's connection is told of.
type headCounter struct {
	net.Listener
	heads *atomic.Int64
}

func (l headCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &phaseCounter{Conn: c, heads: l.heads}, nil
}

type phaseCounter struct {
	net.Conn
	heads *atomic.Int64
}

func (c *phaseCounter) HeadDone()         { c.heads.Add(1) }
func (c *phaseCounter) BodyStart()        {}
func (c *phaseCounter) BodyDone()         {}
func (c *phaseCounter) RequestDone()      {}
func (c *phaseCounter) NetConn() net.Conn { return c.Conn }

// A request the handler declines to net/http (host.NetHTTP) goes there
// straight, from an event loop too: the handler is called once for it,
// the fast engine parses its head once (the connection never moves to a
// goroutine of the fast engine first), and ServeHTTP gets the decline's
// note for that request only, not for the connection's later requests
// net/http serves.
func TestVerdictNetHTTP(t *testing.T) { fastModes(t, testVerdictNetHTTP) }

func testVerdictNetHTTP(t *testing.T, m mode) {
	v := newVerdictHandler()
	var heads atomic.Int64
	e := start(t, m, host.Limits{}, func(c *host.Config) {
		c.WrapListener = func(ln net.Listener) net.Listener { return headCounter{ln, &heads} }
	})
	e.H.Activate(v)
	rc := dialRaw(t, e)
	for _, c := range []struct{ path, want string }{
		{"/a", "fast /a"},
		{"/login", "nethttp /login login note"},
		{"/login", "nethttp /login "}, // net/http's from now on, without a note
		{"/a", "nethttp /a "},
	} {
		rc.Send("GET " + c.path + " HTTP/1.1\r\nHost: x\r\n\r\n")
		if r := rc.Read("GET"); r.Status != 200 || r.Body != c.want {
			t.Fatalf("%s: %d %q, want %q", c.path, r.Status, r.Body, c.want)
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.calls["/login"] != 1 || v.calls["/a"] != 1 {
		t.Fatalf("ServeHTTP1 called %v, want once for /a and once for /login", v.calls)
	}
	if n := heads.Load(); n != 2 {
		t.Fatalf("the fast engine parsed and served %d heads, want 2 (/a, /login once)", n)
	}
	if st := e.H.EngineStats(); st.LeftLoop != 0 || st.HandedOver != 1 {
		t.Fatalf("engine stats %+v, want the connection handed over once and never moved off a loop", st)
	}
}

// A request the handler declines off the loop (host.OffLoop) is served
// by ServeHTTP1 again with a goroutine, which gets the decline's note as
// Exchange.Note for that request only; off a loop, OffLoop means
// net/http, with the note.
func TestVerdictOffLoop(t *testing.T) {
	t.Run("mode=loop", func(t *testing.T) {
		v := newVerdictHandler()
		e := start(t, modeLoop, host.Limits{})
		e.H.Activate(v)
		rc := dialRaw(t, e)
		rc.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /block HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
		for _, want := range []string{"fast /a", "fast /block", "fast /b"} {
			if r := rc.Read("GET"); r.Status != 200 || r.Body != want {
				t.Fatalf("got %d %q, want %q", r.Status, r.Body, want)
			}
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		if got := v.notes["/block"]; len(got) != 2 || got[0] != nil || got[1] != "block note" || v.where["/block"] != "goroutine" {
			t.Fatalf("/block: notes %v, last served on %s; want nil on the loop, then its note off it", got, v.where["/block"])
		}
		for _, p := range []string{"/a", "/b"} {
			if got := v.notes[p]; len(got) != 1 || got[0] != nil {
				t.Fatalf("%s: notes %v, want one call without a note", p, got)
			}
		}
		if st := e.H.EngineStats(); st.LeftLoop != 1 || st.Rejoined != 1 || st.HandedOver != 0 {
			t.Fatalf("engine stats %+v", st)
		}
	})
	t.Run("mode=fast", func(t *testing.T) {
		v := &offLoopAlways{newVerdictHandler()}
		e := start(t, modeFast, host.Limits{})
		e.H.Activate(v)
		rc := dialRaw(t, e)
		rc.Send("GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		if r := rc.Read("GET"); r.Status != 200 || r.Body != "nethttp /block block note" {
			t.Fatalf("got %d %q", r.Status, r.Body)
		}
		if st := e.H.EngineStats(); st.HandedOver != 1 {
			t.Fatalf("engine stats %+v", st)
		}
	})
}

// offLoopAlways declines every request with OffLoop.
type offLoopAlways struct{ *verdictHandler }

func (o *offLoopAlways) ServeHTTP1(x *h1.Exchange) host.Verdict {
	return host.OffLoop("block note")
}

// A Verdict says what it is.
func TestVerdictString(t *testing.T) {
	for _, c := range []struct {
		v        host.Verdict
		name     string
		declined bool
		note     any
	}{
		{host.Served, "served", false, nil},
		{host.OffLoop(1), "offloop", true, 1},
		{host.NetHTTP("n"), "nethttp", true, "n"},
	} {
		if c.v.String() != c.name || c.v.Declined() != c.declined || c.v.Note() != c.note {
			t.Errorf("%v: declined %v, note %v", c.v, c.v.Declined(), c.v.Note())
		}
	}
	if !strings.Contains(host.NetHTTP(nil).String(), "http") {
		t.Error("NetHTTP(nil) lost its kind")
	}
}
