package console

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// stream is one open event stream read by the test.
type stream struct {
	t    *testing.T
	res  *http.Response
	br   *bufio.Reader
	body io.Closer
}

// openStream opens GET /ui/api/events on srv with the session cookie.
func openStream(t *testing.T, srv *httptest.Server, ck *http.Cookie) (*stream, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/ui/api/events", nil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Accept", "text/event-stream")
	if ck != nil {
		req.AddCookie(ck)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		return nil, res
	}
	s := &stream{t: t, res: res, br: bufio.NewReader(res.Body), body: res.Body}
	t.Cleanup(func() { res.Body.Close() })
	return s, res
}

// frame reads one frame (up to a blank line) and returns its lines.
func (s *stream) frame() []string {
	s.t.Helper()
	var lines []string
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if err == io.EOF && len(lines) == 0 && line == "" {
				return nil
			}
			s.t.Fatalf("read: %v after %q", err, lines)
		}
		if !strings.HasSuffix(line, "\n") || strings.Contains(line, "\r") {
			s.t.Fatalf("malformed line %q", line)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return lines
		}
		lines = append(lines, line)
	}
}

// snapshot reads one snapshot event and checks its framing: exactly an
// id, the event name and one data line of JSON.
func (s *stream) snapshot(wantID int) View {
	s.t.Helper()
	lines := s.frame()
	if len(lines) != 3 || lines[0] != fmt.Sprintf("id: %d", wantID) || lines[1] != "event: snapshot" || !strings.HasPrefix(lines[2], "data: {") {
		s.t.Fatalf("frame %q, want id %d", lines, wantID)
	}
	var v View
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "data: ")), &v); err != nil {
		s.t.Fatalf("data: %v", err)
	}
	return v
}

// eof asserts the server ended the stream.
func (s *stream) eof() {
	s.t.Helper()
	if lines := s.frame(); lines != nil {
		s.t.Fatalf("frame %q, want the end of the stream", lines)
	}
}

// TestEventStream: the framing (a retry hint, then snapshot events with
// increasing ids and one line of JSON each), the content of a snapshot,
// one event per tick with the counters moving, and the end of the stream
// when its session logs out.
func TestEventStream(t *testing.T) {
	f := newFixture(t, nil)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close) // after the streams' own cleanups close their bodies
	ck := f.login()

	s, res := openStream(t, srv, ck)
	if s == nil {
		t.Fatalf("open: %d", res.StatusCode)
	}
	h := res.Header
	if h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-store" || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("headers %v", h)
	}
	if lines := s.frame(); len(lines) != 1 || lines[0] != "retry: 2000" {
		t.Fatalf("first frame %q", lines)
	}
	v := s.snapshot(1)
	if v.Status.Version != "test" || v.Status.Requests != 0 || v.Rejected != 10 || !v.At.Equal(f.clk.Now()) || !v.Reload {
		t.Errorf("snapshot %+v", v)
	}
	if len(v.TopReasons) != 2 || v.TopReasons[0] != (ReasonCount{"rate_limit", "over_limit", 7}) || v.TopReasons[1] != (ReasonCount{"shield", "peer", 3}) {
		t.Errorf("top reasons %+v", v.TopReasons)
	}
	if len(v.TopRoutes) != 1 || v.TopRoutes[0] != (RouteCount{"api", 7}) {
		t.Errorf("top routes %+v", v.TopRoutes)
	}
	if len(v.Tables) != 1 || v.Tables[0] != (TableRow{"shield", Table{2, 4096}}) || v.Lists["deny"] != (Table{0, 4}) {
		t.Errorf("tables %+v lists %+v", v.Tables, v.Lists)
	}

	for i := 2; i <= 4; i++ {
		f.requests.Add(5)
		f.clk.Advance(time.Second)
		f.ticks.tick()
		if v := s.snapshot(i); v.Status.Requests != uint64(5*(i-1)) {
			t.Errorf("tick %d: requests %d", i, v.Status.Requests)
		}
	}

	if w := f.change("POST", "/ui/api/logout", "", ck); w.Code != 204 {
		t.Fatal(w.Code)
	}
	f.clk.Advance(time.Second)
	f.ticks.tick()
	if lines := s.frame(); len(lines) != 2 || lines[0] != "event: logout" || lines[1] != "data: {}" {
		t.Fatalf("after logout: %q", lines)
	}
	s.eof()
	if s, res := openStream(t, srv, ck); s != nil || res.StatusCode != 401 {
		t.Errorf("reopened after logout: %d", res.StatusCode)
	} else {
		res.Body.Close()
	}
}

// TestEventStreamEnds: a stream lasts StreamDuration (in ticks), then
// ends cleanly so the browser reconnects (and re-checks its session);
// an expired session ends it too.
func TestEventStreamEnds(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.StreamDuration = 3 * time.Second; c.SessionIdle = time.Minute })
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close) // after the streams' own cleanups close their bodies
	ck := f.login()
	s, _ := openStream(t, srv, ck)
	s.frame()
	for i := 1; i <= 4; i++ {
		if i > 1 {
			f.clk.Advance(time.Second)
			f.ticks.tick()
		}
		s.snapshot(i)
	}
	s.eof()

	// The idle timeout: the stream does not count as use. (The clock has
	// not moved: the new stream gets the shared snapshot.)
	s, _ = openStream(t, srv, ck)
	s.frame()
	s.snapshot(4)
	f.clk.Advance(time.Minute)
	f.ticks.tick()
	if lines := s.frame(); len(lines) != 2 || lines[0] != "event: logout" {
		t.Fatalf("after the idle timeout: %q", lines)
	}
	s.eof()
}

// TestEventStreamsBounded: at most MaxStreams at once (503 overloaded
// beyond, the session's and everyone's); a closed stream frees its slot.
func TestEventStreamsBounded(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxStreams = 2 })
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close) // after the streams' own cleanups close their bodies
	ck := f.login()
	a, _ := openStream(t, srv, ck)
	a.frame()
	b, _ := openStream(t, srv, f.login())
	b.frame()
	if s, res := openStream(t, srv, ck); s != nil || res.StatusCode != 503 {
		t.Fatalf("third stream: %d", res.StatusCode)
	} else {
		var p struct{ Code string }
		json.NewDecoder(res.Body).Decode(&p)
		res.Body.Close()
		if p.Code != "overloaded" {
			t.Errorf("third stream: code %q", p.Code)
		}
	}
	a.body.Close()
	waitFor(t, "the closed stream to end", func() bool { return f.ticks.open() == 1 && f.c.streams.Load() == 1 })
	c, res := openStream(t, srv, ck)
	if c == nil {
		t.Fatalf("after a stream closed: %d", res.StatusCode)
	}
	c.frame()
	c.snapshot(1)
	if w := f.do("HEAD", "/ui/api/events", "", "Cookie", ck.String()); w.Code != 405 {
		t.Errorf("HEAD events: %d", w.Code)
	}
}

// TestEventsCostNothingUnwatched: building the console starts nothing;
// nothing is computed while no stream is open (logins, list reads and
// changes do not compute the status); open streams share one snapshot
// per second whatever their number; once they close, computing stops.
func TestEventsCostNothingUnwatched(t *testing.T) {
	before := runtime.NumGoroutine()
	var fs []*fixture
	for range 10 {
		fs = append(fs, newFixture(t, nil))
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("building 10 consoles started %d goroutines", after-before)
	}
	f := fs[0]
	ck := f.login()
	f.get("/ui/api/lists/deny", ck)
	f.change("POST", "/ui/api/lists/deny", `{"ip": "192.0.2.1"}`, ck)
	for range 5 {
		f.clk.Advance(time.Second)
		f.ticks.tick()
	}
	if n := f.statusCalls.Load(); n != 0 {
		t.Fatalf("status computed %d times with no one watching", n)
	}

	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close) // after the streams' own cleanups close their bodies
	var ss []*stream
	for range 3 {
		s, _ := openStream(t, srv, ck)
		s.frame()
		s.snapshot(1)
		ss = append(ss, s)
	}
	if n := f.statusCalls.Load(); n != 1 {
		t.Errorf("3 streams opened in the same second computed %d snapshots, want 1", n)
	}
	for i := 2; i <= 4; i++ {
		f.clk.Advance(time.Second)
		f.ticks.tick()
		for _, s := range ss {
			s.snapshot(i)
		}
	}
	if n := f.statusCalls.Load(); n != 4 {
		t.Errorf("3 streams over 3 more ticks computed %d snapshots, want 4", n)
	}
	for _, s := range ss {
		s.body.Close()
	}
	waitFor(t, "the streams to end", func() bool { return f.ticks.open() == 0 && f.c.streams.Load() == 0 })
	for range 5 {
		f.clk.Advance(time.Second)
		f.ticks.tick()
	}
	if n := f.statusCalls.Load(); n != 4 {
		t.Errorf("computing went on after the streams closed: %d", n)
	}
}

// waitFor polls cond (the server side of a closed connection ends
// asynchronously), failing after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestView: the top tables are sorted (largest first, then by name),
// aggregate routes across layers, skip zero counts and rejections
// without a route, and hold at most MaxTop rows; oversized inputs are
// cut to their bounds and flagged.
func TestView(t *testing.T) {
	f := newFixture(t, nil)
	var rej []Rejection
	for i := range 30 {
		rej = append(rej, Rejection{Layer: "rate_limit", Reason: fmt.Sprintf("r%02d", i), Route: fmt.Sprintf("route%02d", i%15), Count: uint64(i)})
	}
	rej = append(rej, Rejection{Layer: "login", Reason: "r29", Route: "route14", Count: 29}, Rejection{Layer: "host", Reason: "timeout", Count: 100})
	f.c.cfg.Status = func() Status { return Status{Rejections: rej} }
	v := f.c.view(f.clk.Now())
	if v.Truncated || len(v.TopReasons) != MaxTop || len(v.TopRoutes) != MaxTop {
		t.Fatalf("view %+v", v)
	}
	if v.TopReasons[0] != (ReasonCount{"host", "timeout", 100}) || v.TopReasons[1] != (ReasonCount{"login", "r29", 29}) || v.TopReasons[2] != (ReasonCount{"rate_limit", "r29", 29}) {
		t.Errorf("top reasons %+v", v.TopReasons[:3])
	}
	// route14 = 14 + 29 + 29; route13 = 13 + 28.
	if v.TopRoutes[0] != (RouteCount{"route14", 72}) || v.TopRoutes[1] != (RouteCount{"route13", 41}) {
		t.Errorf("top routes %+v", v.TopRoutes[:2])
	}
	for _, r := range v.TopReasons {
		if r.Count == 0 {
			t.Error("a zero count is ranked")
		}
	}
	if v.Rejected != 100+29+29*30/2 {
		t.Errorf("rejected %d", v.Rejected)
	}
	if v.Status.Layers == nil || v.Status.Rejections != nil {
		t.Errorf("status %+v", v.Status)
	}

	big := make([]Rejection, MaxRejections+10)
	for i := range big {
		big[i] = Rejection{Layer: "x", Reason: "y", Count: 1}
	}
	layers := make([]Layer, MaxLayers+1)
	f.c.cfg.Status = func() Status { return Status{Rejections: big, Layers: layers} }
	f.c.cfg.Tables = func() map[string]Table {
		m := map[string]Table{}
		for i := range MaxTables + 5 {
			m[fmt.Sprintf("t%04d", i)] = Table{i, 10}
		}
		return m
	}
	v = f.c.view(f.clk.Now())
	if !v.Truncated || v.Rejected != MaxRejections || len(v.Status.Layers) != MaxLayers || len(v.Tables) != MaxTables || v.Tables[0].Name != "t0000" {
		t.Errorf("bounds: truncated %v rejected %d layers %d tables %d", v.Truncated, v.Rejected, len(v.Status.Layers), len(v.Tables))
	}
	b, _ := json.Marshal(v)
	if len(b) > 64<<10 {
		t.Errorf("a maximal view encodes to %d bytes", len(b))
	}
}
