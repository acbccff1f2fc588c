package console

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/ipset"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	token  = "console-test-token-0123456789"
	addr   = "127.0.0.1:9091"
	origin = "http://" + addr
)

// fixture is a console over real ipsets, a manual clock, a counting
// status func, an audit buffer and hand-driven stream ticks.
type fixture struct {
	t           testing.TB
	c           *console
	h           http.Handler
	clk         *clock.Manual
	audit       *syncBuffer
	allow, deny *ipset.Set
	statusCalls atomic.Int64
	requests    atomic.Uint64
	ticks       *ticker
	reload      func(context.Context) error
}

func newFixture(t testing.TB, mod func(*Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, clk: clock.NewManual(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)), audit: &syncBuffer{}, ticks: &ticker{}}
	var err error
	if f.allow, err = ipset.New(ipset.Config{Name: "allow", Capacity: 4, Clock: f.clk}); err != nil {
		t.Fatal(err)
	}
	if f.deny, err = ipset.New(ipset.Config{Name: "deny", Capacity: 4, Clock: f.clk}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Token: token,
		Addr:  addr,
		Status: func() Status {
			f.statusCalls.Add(1)
			return Status{
				Version: "test", State: "ready", Ready: true, Requests: f.requests.Load(),
				Layers: []Layer{{Name: "shield", On: true, Detail: "300 per client"}},
				Rejections: []Rejection{
					{Layer: "rate_limit", Reason: "over_limit", Route: "api", Count: 7},
					{Layer: "shield", Reason: "peer", Count: 3},
				},
			}
		},
		Tables: func() map[string]Table { return map[string]Table{"shield": {Len: 2, Capacity: 4096}} },
		Allow:  f.allow,
		Deny:   f.deny,
		Reload: func(ctx context.Context) error {
			if f.reload != nil {
				return f.reload(ctx)
			}
			return nil
		},
		Audit: slog.New(slog.NewJSONHandler(f.audit, nil)),
		Clock: f.clk,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := newConsole(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.newTicker = f.ticks.new
	f.c, f.h = c, c
	return f
}

// sameOrigin headers, as Chromium sends them on a fetch from the page.
var sameOriginHdr = []string{"Origin", origin, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}

// do serves one request in process, from 192.0.2.1 unless RemoteAddr is
// given as a header pair, with Host set to the console's address.
func (f *fixture) do(method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	r.Host = addr
	for i := 0; i+1 < len(hdr); i += 2 {
		switch hdr[i] {
		case "RemoteAddr":
			r.RemoteAddr = hdr[i+1]
		case "Host":
			r.Host = hdr[i+1]
		default:
			r.Header.Add(hdr[i], hdr[i+1])
		}
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// change sends a state-changing request the way the page does: JSON,
// same origin, with the session cookie.
func (f *fixture) change(method, path, body string, ck *http.Cookie, hdr ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	h := append([]string{"Content-Type", "application/json"}, sameOriginHdr...)
	if ck != nil {
		h = append(h, "Cookie", ck.String())
	}
	return f.do(method, path, body, append(h, hdr...)...)
}

// get sends a read with the session cookie.
func (f *fixture) get(path string, ck *http.Cookie) *httptest.ResponseRecorder {
	f.t.Helper()
	h := []string{"Sec-Fetch-Site", "same-origin"}
	if ck != nil {
		h = append(h, "Cookie", ck.String())
	}
	return f.do("GET", path, "", h...)
}

// login logs in and returns the session cookie.
func (f *fixture) login(hdr ...string) *http.Cookie {
	f.t.Helper()
	w := f.change("POST", "/ui/api/login", `{"token": "`+token+`"}`, nil, hdr...)
	if w.Code != 200 {
		f.t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	return sessionCookie(f.t, w)
}

func sessionCookie(t testing.TB, w *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range w.Result().Cookies() {
		if c.Name == CookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", CookieName, w.Header()["Set-Cookie"])
	return nil
}

// code returns the problem code of an answer ("" when not a problem).
func code(w *httptest.ResponseRecorder) string {
	if w.Header().Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p struct{ Code string }
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	return p.Code
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %q: %v", w.Body, err)
	}
	return v
}

// ticker hands each event stream its own tick channel; tick sends one
// tick to every open stream.
type ticker struct {
	mu    sync.Mutex
	chans map[chan time.Time]bool
}

func (tk *ticker) new(time.Duration) (<-chan time.Time, func()) {
	ch := make(chan time.Time, 1)
	tk.mu.Lock()
	if tk.chans == nil {
		tk.chans = map[chan time.Time]bool{}
	}
	tk.chans[ch] = true
	tk.mu.Unlock()
	return ch, func() {
		tk.mu.Lock()
		delete(tk.chans, ch)
		tk.mu.Unlock()
	}
}

func (tk *ticker) open() int {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return len(tk.chans)
}

func (tk *ticker) tick() {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	for ch := range tk.chans {
		select {
		case ch <- time.Time{}:
		default: // the stream has not taken the previous tick yet
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newRequest(method, path, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	r.Host = addr
	return r
}
