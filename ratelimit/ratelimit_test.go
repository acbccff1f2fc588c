package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/wire"
)

var t0 = time.Unix(1_700_000_000, 0)

func newTest(t testing.TB, g limit.GCRA, o Options) (*Limiter, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(t0)
	o.Clock = clk
	l, err := New(g, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l, clk
}

func TestAllowBurstThenRate(t *testing.T) {
	l, clk := newTest(t, limit.GCRA{Rate: 2, Burst: 3}, Options{})
	for i := 0; i < 3; i++ {
		if d := l.Allow("k"); !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("attempt %d: %+v", i, d)
		}
	}
	d := l.Allow("k")
	if d.Allowed || d.RetryAfter != 500*time.Millisecond || d.Full {
		t.Fatalf("over burst: %+v", d)
	}
	if d := l.Allow("other"); !d.Allowed {
		t.Fatalf("another key shares the bucket: %+v", d)
	}
	clk.Advance(500 * time.Millisecond)
	if d := l.Allow("k"); !d.Allowed {
		t.Fatalf("after one interval: %+v", d)
	}
	if d := l.Allow("k"); d.Allowed {
		t.Fatalf("second unit after one interval admitted: %+v", d)
	}
}

func TestAllowN(t *testing.T) {
	l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 5}, Options{})
	if d := l.AllowN("k", 4); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("%+v", d)
	}
	if d := l.AllowN("k", 2); d.Allowed {
		t.Fatalf("all-or-none violated: %+v", d)
	}
	if d := l.AllowN("k", 0); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("query: %+v", d)
	}
	if d := l.AllowN("k", 6); d.Allowed || d.RetryAfter != limit.InfDuration {
		t.Fatalf("n > burst: %+v", d)
	}
}

// Strings and addresses are separate key spaces: the string form of an
// address does not share its bucket.
func TestKeySpaces(t *testing.T) {
	l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 1}, Options{})
	a := netip.MustParseAddr("192.0.2.1")
	if !l.AllowAddr(a, 1).Allowed || l.AllowAddr(a, 1).Allowed {
		t.Fatal("address bucket")
	}
	if !l.Allow("192.0.2.1").Allowed {
		t.Fatal("string key shares the address bucket")
	}
	if !l.AllowKey(StringKey(""), 1).Allowed || l.AllowKey(Key{}, 1).Allowed {
		t.Fatal("the zero Key is the empty string key")
	}
}

// A full table refuses new keys (fail closed), never evicts a live
// bucket, and admits new keys again once buckets refill.
func TestFullTableFailsClosed(t *testing.T) {
	l, clk := newTest(t, limit.GCRA{Rate: 1, Burst: 2}, Options{MaxKeys: 100})
	for i := 0; i < 100; i++ {
		if d := l.Allow(fmt.Sprint("k", i)); !d.Allowed {
			t.Fatalf("key %d: %+v", i, d)
		}
	}
	for i := 0; i < 1000; i++ {
		d := l.Allow(fmt.Sprint("new", i))
		if d.Allowed || !d.Full || d.RetryAfter < time.Second {
			t.Fatalf("new key on a full table: %+v", d)
		}
		if l.Len() > 100 {
			t.Fatalf("table grew to %d", l.Len())
		}
	}
	// Existing keys keep their exact limits.
	if d := l.Allow("k7"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("existing key: %+v", d)
	}
	if d := l.Allow("k7"); d.Allowed || d.Full {
		t.Fatalf("existing key over its limit: %+v", d)
	}
	clk.Advance(3 * time.Second) // every bucket is full again: reclaimable
	if d := l.Allow("late"); !d.Allowed {
		t.Fatalf("after refill: %+v", d)
	}
}

// N goroutines on one key at one instant admit exactly Burst.
func TestConcurrentExact(t *testing.T) {
	l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 37}, Options{})
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if l.Allow("hot").Allowed {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 37 {
		t.Fatalf("admitted %d, want 37", ok.Load())
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		g    limit.GCRA
		o    Options
		want string
	}{
		{limit.GCRA{Rate: 0, Burst: 1}, Options{}, "Rate"},
		{limit.GCRA{Rate: 1, Burst: 0}, Options{}, "Burst"},
		{limit.GCRA{Rate: 0.001, Burst: 1_000_000}, Options{}, ""}, // Burst*T bound
		{limit.GCRA{Rate: 1, Burst: 1}, Options{MaxKeys: -1}, "MaxKeys"},
		{limit.GCRA{Rate: 1, Burst: 1}, Options{MaxKeys: MaxMaxKeys + 1}, "MaxKeys"},
		{limit.GCRA{Rate: 1, Burst: 1}, Options{ScanLimit: -1}, "ScanLimit"},
		{limit.GCRA{Rate: 1, Burst: 1}, Options{Policy: `a"b`}, "Policy"},
		{limit.GCRA{Rate: 1, Burst: 1}, Options{Policy: strings.Repeat("p", 65)}, "Policy"},
	} {
		err := Validate(c.g, c.o)
		if err == nil {
			t.Errorf("%+v %+v accepted", c.g, c.o)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v %+v: %v does not name %s", c.g, c.o, err, c.want)
		}
		if _, nerr := New(c.g, c.o); nerr == nil {
			t.Errorf("New accepted what Validate refused: %+v %+v", c.g, c.o)
		}
	}
	if err := Validate(limit.GCRA{Rate: 1, Burst: 1}, Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestPerSecond(t *testing.T) {
	if g := PerSecond(2.5, 0); g.Burst != 3 || g.Rate != 2.5 {
		t.Errorf("%+v", g)
	}
	if g := PerSecond(0.1, 0); g.Burst != 1 {
		t.Errorf("%+v", g)
	}
}

// serve runs h on a real loopback listener.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// clientFrom returns an HTTP client whose connections come from src.
func clientFrom(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

func TestMiddlewareClientIP(t *testing.T) {
	l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 2}, Options{Policy: "api"})
	var rejected atomic.Int64
	mw, err := l.Middleware(ClientIP(nil), MiddlewareOptions{OnReject: func(reason string) {
		if reason == "over_limit" {
			rejected.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
	a, b := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	for i := 0; i < 2; i++ {
		if st := get(t, a, url).StatusCode; st != 200 {
			t.Fatalf("attempt %d: %d", i, st)
		}
	}
	resp := get(t, a, url)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("over limit: %d %v", resp.StatusCode, resp.Header)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"api";q=2;w=2` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := resp.Header.Get("RateLimit"); got != `"api";r=0;t=1` {
		t.Errorf("RateLimit %q", got)
	}
	var p map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&p)
	if p["code"] != wire.CodeRateLimited || resp.Header.Get("Content-Type") != wire.ContentType {
		t.Errorf("body %v", p)
	}
	if resp.Close {
		t.Error("a bodiless refusal closed the keep-alive connection")
	}
	if st := get(t, b, url).StatusCode; st != 200 {
		t.Fatalf("another address: %d", st)
	}
	if rejected.Load() != 1 {
		t.Errorf("OnReject over_limit called %d times", rejected.Load())
	}
}

func get(t *testing.T, c *http.Client, url string, h ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "GET", url, nil)
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Add(h[i], h[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestMiddlewareHeaderKey(t *testing.T) {
	l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 1}, Options{})
	mw, err := l.Middleware(Header("X-API-Key", ClientIP(nil)), MiddlewareOptions{Headers: HeadersAlways, Status: 503})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	c := http.DefaultClient
	resp := get(t, c, url, "X-API-Key", "k1")
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") == "" {
		t.Fatalf("allowed: %d, RateLimit %q (Headers: always)", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if st := get(t, c, url, "X-API-Key", "k1").StatusCode; st != 503 {
		t.Fatalf("configured status: %d", st)
	}
	if st := get(t, c, url, "X-API-Key", "k2").StatusCode; st != 200 {
		t.Fatalf("another key: %d", st)
	}
	resp = get(t, c, url, "X-API-Key", "k3", "X-API-Key", "k4")
	var p map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&p)
	if resp.StatusCode != 400 || p["code"] != wire.CodeAmbiguousRateLimitKey {
		t.Fatalf("repeated header: %d %v", resp.StatusCode, p)
	}
	// No header: the client address is the key (the fallback).
	if st := get(t, c, url).StatusCode; st != 200 {
		t.Fatalf("fallback first: %d", st)
	}
	if st := get(t, c, url).StatusCode; st != 503 {
		t.Fatalf("fallback second: %d", st)
	}
}

func TestMiddlewareConfigErrors(t *testing.T) {
	l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 1}, Options{})
	for _, o := range []MiddlewareOptions{{Status: 200}, {Status: 600}, {Headers: 9}} {
		if _, err := l.Middleware(ClientIP(nil), o); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := l.Middleware(nil, MiddlewareOptions{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil KeyFunc: %v", err)
	}
	if _, err := PerIP(0, 1); err == nil {
		t.Error("PerIP(0, 1) accepted")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustPerIP(-1, 0) did not panic")
		}
	}()
	MustPerIP(-1, 0)
}

// A refusal of a request that announced a body closes the HTTP/1.1
// connection at once, without waiting for the body.
func TestRejectionWithBodyCloses(t *testing.T) {
	l, _ := newTest(t, limit.GCRA{Rate: 1, Burst: 1}, Options{})
	mw, _ := l.Middleware(Route("r"), MiddlewareOptions{})
	url := serve(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })))
	l.Allow("r") // spend the route's bucket (Route keys by the name)
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second)) // a safety deadline only
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
	b, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(b), "HTTP/1.1 429") || !strings.Contains(string(b), "Connection: close") {
		t.Fatalf("got %q", b)
	}
}

func BenchmarkAllowAddrParallel(b *testing.B) {
	l, err := New(limit.GCRA{Rate: 100, Burst: 100}, Options{MaxKeys: 100_000})
	if err != nil {
		b.Fatal(err)
	}
	a := netip.MustParseAddr("2001:db8::1")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.AllowAddr(a, 1)
		}
	})
}

// BenchmarkMiddleware measures the middleware's own cost per request
// (in-process, no network): compare with BenchmarkBareHandler.
func BenchmarkMiddleware(b *testing.B) {
	l, err := New(limit.GCRA{Rate: limit.MaxRate, Burst: limit.MaxBurst}, Options{}) // never refuses
	if err != nil {
		b.Fatal(err)
	}
	mw, _ := l.Middleware(ClientIP(nil), MiddlewareOptions{})
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
	if w.Code != 200 {
		b.Fatalf("refused: %d", w.Code)
	}
}

// Header treats X_Api_Key as another spelling of X-Api-Key (CGI-style
// servers read both as HTTP_X_API_KEY): both together are ambiguous, the
// '_' spelling alone is the key.
func TestHeaderUnderscoreSpellings(t *testing.T) {
	kf := Header("X-Api-Key", nil)
	for _, c := range []struct {
		name    string
		fields  [][2]string
		want    string
		wantErr bool
	}{
		{"canonical", [][2]string{{"X-Api-Key", "a"}}, "a", false},
		{"underscore alone", [][2]string{{"X_Api_Key", "b"}}, "b", false},
		{"lower underscore alone", [][2]string{{"x_api_key", "b"}}, "b", false},
		{"both", [][2]string{{"X-Api-Key", "a"}, {"X_Api_Key", "b"}}, "", true},
		{"two underscore spellings", [][2]string{{"X_Api-Key", "a"}, {"X-Api_Key", "b"}}, "", true},
		{"repeated", [][2]string{{"X-Api-Key", "a"}, {"X-Api-Key", "b"}}, "", true},
		{"other header", [][2]string{{"X-Api-Key", "a"}, {"X_Api_Keys", "b"}}, "a", false},
	} {
		r, _ := http.NewRequest("GET", "http://x/", nil)
		for _, f := range c.fields {
			r.Header[f[0]] = append(r.Header[f[0]], f[1]) // as sent: no canonicalisation of '_' names
		}
		k, err := kf(r)
		if c.wantErr {
			if !errors.Is(err, ErrAmbiguousKey) {
				t.Errorf("%s: key %v err %v, want ErrAmbiguousKey", c.name, k, err)
			}
			continue
		}
		if err != nil || k != StringKey(c.want) {
			t.Errorf("%s: key %v err %v, want %q", c.name, k, err, c.want)
		}
	}
}

// A key header whose name has no '-' (so no '_' spelling to look for)
// sent twice is ambiguous all the same: the limiter could count one line
// while the application reads the other.
func TestHeaderWithoutDashSentTwice(t *testing.T) {
	for _, name := range []string{"Authorization", "apikey", "Token"} {
		kf := Header(name, nil)
		canonical := http.CanonicalHeaderKey(name)
		r, _ := http.NewRequest("GET", "http://x/", nil)
		r.Header[canonical] = []string{"a"}
		if k, err := kf(r); err != nil || k != StringKey("a") {
			t.Errorf("%s once: key %v err %v, want \"a\"", name, k, err)
		}
		r.Header[canonical] = []string{"a", "b"}
		if k, err := kf(r); !errors.Is(err, ErrAmbiguousKey) {
			t.Errorf("%s twice: key %v err %v, want ErrAmbiguousKey", name, k, err)
		}
		r.Header[canonical] = []string{"a", "a"}
		if k, err := kf(r); !errors.Is(err, ErrAmbiguousKey) {
			t.Errorf("%s twice, same value: key %v err %v, want ErrAmbiguousKey", name, k, err)
		}
	}
}

// Looking for '_' spellings costs no allocation.
func TestNoRaceHeaderKeyAllocs(t *testing.T) {
	kf := Header("X-Api-Key", nil)
	r, _ := http.NewRequest("GET", "http://x/", nil)
	r.Header.Set("X-Api-Key", "a")
	r.Header.Set("Accept", "*/*")
	r.Header.Set("User-Agent", "t")
	if n := testing.AllocsPerRun(100, func() { _, _ = kf(r) }); n != 0 {
		t.Fatalf("%v allocs per key", n)
	}
}

// Every decision, on the lock-free path for existing keys and through
// the table's Update for new ones, is exactly the GCRA's on the key's
// arrival time: a random walk of keys, costs (queries and costs above
// the burst included) and clock steps against limit.CompiledGCRA.Advance
// on a map of arrival times.
func TestAllowMatchesGCRA(t *testing.T) {
	g := limit.GCRA{Rate: 5, Burst: 4}
	l, clk := newTest(t, g, Options{})
	c := g.Compile()
	ref := map[string]int64{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20_000 {
		clk.Advance(time.Duration(r.IntN(int(100 * time.Millisecond))))
		now := clock.Mono(clk.Now())
		key := fmt.Sprint("k", r.IntN(5))
		n := int64(r.IntN(7)) - 1 // -1 to 5: queries, admissions, n > Burst
		tat, ok := ref[key]
		if !ok {
			tat = limit.FullTAT
		}
		next, want := c.Advance(tat, now, n)
		if next != tat || ok {
			ref[key] = next // a refused or queried new key leaves no bucket
		}
		var got Decision
		if i%2 == 0 {
			got = l.AllowN(key, n)
		} else if n == 1 {
			got = l.Allow(key)
		} else {
			got = l.AllowKey(StringKey(key), n)
		}
		if got.Decision != want || got.Full {
			t.Fatalf("op %d: %s n=%d: got %+v, want %+v", i, key, n, got, want)
		}
	}
}

// A limiter on a clock.Coarse reads it inline, started or not.
func TestCoarseClock(t *testing.T) {
	c, err := clock.NewCoarse(time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	g := limit.GCRA{Rate: 1.0 / (24 * 60 * 60), Burst: 3} // refills in days: real time does not matter
	for _, started := range []bool{false, true} {
		if started {
			c.Start()
			defer c.Stop()
		}
		l, err := New(g, Options{Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if d := l.Allow("k"); !d.Allowed || d.Remaining != int64(2-i) {
				t.Fatalf("started %v attempt %d: %+v", started, i, d)
			}
		}
		if d := l.Allow("k"); d.Allowed || d.RetryAfter < 23*time.Hour {
			t.Fatalf("started %v, over burst: %+v", started, d)
		}
		l.Close()
	}
}

// Decisions allocate nothing: new and existing string and address keys,
// admitted and refused, on the monotonic and the coarse clock.
func TestNoRaceAllowNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	c, err := clock.NewCoarse(time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	defer c.Stop()
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprint("client-", i) // short and long keys
		if i%2 == 1 {
			keys[i] += "-with-a-name-longer-than-sixteen-bytes"
		}
	}
	a := netip.MustParseAddr("2001:db8::1")
	for _, clk := range []clock.Clock{nil, c} {
		l, err := New(limit.GCRA{Rate: 1, Burst: 2}, Options{MaxKeys: 1000, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		i, n := 0, 0
		if allocs := testing.AllocsPerRun(1000, func() {
			k := keys[i%len(keys)]
			i++
			for _, d := range []Decision{l.Allow(k), l.AllowN(k, 2), l.AllowAddr(a, 1), l.AllowKey(AddrKey(a), 1), l.AllowKey(StringKey(k), 0)} {
				if d.Allowed {
					n++
				}
			}
		}); allocs != 0 {
			t.Errorf("clock %T: %v allocations per round", clk, allocs)
		}
		if n == 0 {
			t.Error("nothing admitted: the test did not exercise admissions")
		}
		l.Close()
	}
}
