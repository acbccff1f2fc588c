package login_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// BenchmarkEvaluateMemory measures one Evaluate on the memory store with
// the default limit (5 per 60 s) on the real clock, SHA-256 of the key
// included. After the first few calls every key's window is full, so this
// is the rejection path, the common case under attack. cpu-ns/op is the
// CPU time of the benchmark's thread per call, which stays meaningful when
// the machine is busy with other work.
func BenchmarkEvaluateMemory(b *testing.B) {
	for _, c := range []struct {
		name string
		keys int
	}{{"one-key", 1}, {"1000-keys", 1000}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := login.NewMemoryStore(login.MemoryConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l, err := login.New(login.Config{Store: s})
			if err != nil {
				b.Fatal(err)
			}
			users := make([]string, c.keys)
			for i := range users {
				users[i] = "user" + strconv.Itoa(i) + "@example.com"
			}
			ctx := context.Background()
			b.ReportAllocs()
			stop := threadCPU(b)
			defer stop()
			i := 0
			for b.Loop() {
				if _, err := l.Evaluate(ctx, "203.0.113.77", users[i]); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(users) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkEvaluateMemoryAllowed keeps every call admitted: a manual clock
// jumps past the window between calls.
func BenchmarkEvaluateMemoryAllowed(b *testing.B) {
	clk := clock.NewManual(t0)
	s, err := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, err := login.New(login.Config{Store: s, Limit: 1, Window: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	stop := threadCPU(b)
	defer stop()
	for b.Loop() {
		clk.Advance(time.Second)
		d, err := l.Evaluate(ctx, "203.0.113.77", "Alice@Example.com")
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

func BenchmarkEvaluateMemoryParallel(b *testing.B) {
	s, err := login.NewMemoryStore(login.MemoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, err := login.New(login.Config{Store: s})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := l.Evaluate(ctx, "203.0.113.77", "user"+strconv.Itoa(i%1000)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkEvaluateMemoryPerClient is BenchmarkEvaluateMemory with the
// per-client dimension on (the gateway's default): two store steps per
// attempt. Every call from this one address after the 20th is refused by
// the client window, the common case under a stuffing attack.
func BenchmarkEvaluateMemoryPerClient(b *testing.B) {
	s, err := login.NewMemoryStore(login.MemoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, err := login.New(login.Config{Store: s, PerClient: login.PerClient{Limit: login.RecommendedPerClientLimit}})
	if err != nil {
		b.Fatal(err)
	}
	users := make([]string, 1000)
	for i := range users {
		users[i] = "user" + strconv.Itoa(i) + "@example.com"
	}
	ctx := context.Background()
	b.ReportAllocs()
	stop := threadCPU(b)
	defer stop()
	i := 0
	for b.Loop() {
		if _, err := l.Evaluate(ctx, "203.0.113.77", users[i]); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(users) {
			i = 0
		}
	}
}

// BenchmarkEvaluateMemoryPerClientAllowed: both dimensions admit every
// call (a manual clock jumps past both windows).
func BenchmarkEvaluateMemoryPerClientAllowed(b *testing.B) {
	clk := clock.NewManual(t0)
	s, err := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, err := login.New(login.Config{Store: s, Limit: 1, Window: time.Second, PerClient: login.PerClient{Limit: 1, Window: time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	stop := threadCPU(b)
	defer stop()
	for b.Loop() {
		clk.Advance(time.Second)
		d, err := l.Evaluate(ctx, "203.0.113.77", "Alice@Example.com")
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// rewindBody is a request body the benchmark rewinds without allocating.
type rewindBody struct{ bytes.Reader }

func (*rewindBody) Close() error { return nil }

// BenchmarkReadUsername reads the username of small login bodies, the
// body read, its copy for the handler and GetBody included.
func BenchmarkReadUsername(b *testing.B) {
	for _, c := range []struct{ name, ct, body string }{
		{"json", "application/json", `{"username":"alice@example.com","password":"correct horse battery staple"}`},
		{"form", "application/x-www-form-urlencoded", "username=alice%40example.com&password=correct+horse+battery+staple"},
		{"multipart", "multipart/form-data; boundary=b0undary", "--b0undary\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nalice@example.com\r\n--b0undary\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\ncorrect horse battery staple\r\n--b0undary--\r\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodPost, "/login", nil)
			r.Header.Set("Content-Type", c.ct)
			body := &rewindBody{}
			data := []byte(c.body)
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				body.Reset(data)
				r.Body, r.ContentLength = body, int64(len(data))
				if u, err := login.ReadUsername(r, login.UsernameOptions{}); err != nil || u != "alice@example.com" {
					b.Fatal(u, err)
				}
			}
		})
	}
}

// BenchmarkMiddleware: one admitted attempt through the whole middleware
// (read, evaluate on the memory store with both dimensions, headers, the
// handler, the lockout fed with the handler's 401) on a reused request
// and a discarding writer, so the figure is the middleware's own cost.
func BenchmarkMiddleware(b *testing.B) {
	clk := clock.NewManual(t0)
	rate, _ := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	locks, _ := login.NewMemoryLockoutStore(login.MemoryConfig{Clock: clk})
	lo, _ := login.NewLockout(login.LockoutConfig{Store: locks, MaxFailures: login.MaxMaxFailures, Clock: clk})
	l, _ := login.New(login.Config{Store: rate, Limit: 1, Window: time.Second, PerClient: login.PerClient{Limit: 1, Window: time.Second}, Lockout: lo, Clock: clk})
	mw, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: l})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }))
	data := []byte(`{"username":"alice@example.com","password":"correct horse battery staple"}`)
	body := &rewindBody{}
	r := httptest.NewRequest(http.MethodPost, "/login", nil)
	r.Header.Set("Content-Type", "application/json")
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	stop := threadCPU(b)
	defer stop()
	for b.Loop() {
		clk.Advance(time.Second)
		body.Reset(data)
		r.Body, r.ContentLength = body, int64(len(data))
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, r)
		if w.status != http.StatusUnauthorized {
			b.Fatal(w.status)
		}
	}
}

type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }
