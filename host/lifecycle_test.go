package host_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/host"
)

// Before Activate only the probes work; the protected surface is 503
// not_ready, answered without reading the body.
func TestBeforeReady(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{})
			r := e.Do("GET", "/livez", nil)
			e.CheckProto(r)
			expect(t, "GET /livez", r, 200, "")
			expect(t, "HEAD /livez", e.Do("HEAD", "/livez", nil), 200, "")
			r = e.Do("GET", "/readyz", nil)
			expect(t, "GET /readyz", r, 503, "not_ready")
			if r.Header.Get("Retry-After") != "1" {
				t.Errorf("readyz Retry-After %q", r.Header.Get("Retry-After"))
			}
			expect(t, "HEAD /readyz", e.Do("HEAD", "/readyz", nil), 503, "")
			r = e.Do("POST", "/readyz", nil)
			expect(t, "POST /readyz", r, 405, "method_not_allowed")
			if r.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q", r.Header.Get("Allow"))
			}
			r = e.Do("POST", "/api/things", strings.NewReader(`{"a":1}`), "Content-Type", "application/json")
			expect(t, "POST /api before ready", r, 503, "not_ready")
			if !m.H2() && !r.Close {
				t.Errorf("HTTP/1.1 rejection did not close the connection")
			}
			if e.H.IsReady() || e.H.InFlight() != 0 {
				t.Errorf("IsReady %v InFlight %d", e.H.IsReady(), e.H.InFlight())
			}
		})
	}
}

// The host answers 503 even though the client announced a body it never
// sends, and then closes the connection: proof that the body is not read.
func TestBeforeReadyBodyNotReadH1(t *testing.T) {
	e := start(t, modeH1, host.Limits{})
	for _, cl := range []int{10 << 20, 100} { // above and below net/http's 256 KiB drain
		t.Run(fmt.Sprint(cl), func(t *testing.T) {
			rc := dialRaw(t, e)
			rc.Send(fmt.Sprintf("POST /api/upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", cl))
			r := rc.Read("POST")
			expect(t, "announced body", r, 503, "not_ready")
			if !r.Close {
				t.Errorf("no Connection: close")
			}
			rc.ExpectEOF()
		})
	}
	// Expect: 100-continue is never granted either.
	rc := dialRaw(t, e)
	rc.Send("POST /api/upload HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000000\r\n\r\n")
	r := rc.Read("POST")
	expect(t, "expect-continue", r, 503, "not_ready")
	rc.ExpectEOF()
}

func TestBeforeReadyBodyNotReadH2(t *testing.T) {
	for _, m := range []mode{modeH2, modeH2C} {
		t.Run(m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{})
			pr, pw := io.Pipe() // never written: the body never arrives
			defer pw.Close()
			r := e.Do("POST", "/api/upload", pr, "Content-Length", "10485760", "Content-Type", "application/json")
			expect(t, "announced body", r, 503, "not_ready")
			// The HTTP/2 connection stays usable for other streams.
			expect(t, "livez after", e.Do("GET", "/livez", nil), 200, "")
		})
	}
}

// Activation flips /readyz and admission together: no client ever sees
// /readyz 200 and then a not_ready API answer, or an admitted API request
// and then /readyz 503.
func TestActivationHammer(t *testing.T) {
	for _, m := range []mode{modeH1, modeH2} {
		t.Run(m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{})
			const workers = 6
			const rounds = 3
			var (
				wg           sync.WaitGroup
				pre          = make(chan struct{}, workers)
				post         = make(chan struct{}, workers)
				stop         = make(chan struct{})
				errs         = make(chan error, workers)
				sawNotReady  = make([]int, workers)
				sawAdmission = make([]int, workers)
			)
			for i := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var preSent, postSent bool
					for {
						select {
						case <-stop:
							return
						default:
						}
						a, err1 := e.Try("GET", "/readyz", nil)
						b, err2 := e.Try("GET", "/api/x", nil)
						c, err3 := e.Try("GET", "/readyz", nil)
						if err := errors.Join(err1, err2, err3); err != nil {
							errs <- err
							return
						}
						admitted := b.Status == 200
						switch {
						case !admitted && (b.Status != 503 || b.Code != "not_ready"):
							errs <- fmt.Errorf("api answered %d %q", b.Status, b.Code)
						case a.Status == 200 && !admitted:
							errs <- fmt.Errorf("readyz 200 then api %d %q", b.Status, b.Code)
						case admitted && c.Status != 200:
							errs <- fmt.Errorf("api admitted then readyz %d", c.Status)
						}
						if admitted {
							sawAdmission[i]++
						} else {
							sawNotReady[i]++
						}
						if !preSent && sawNotReady[i] >= rounds {
							preSent = true
							pre <- struct{}{}
						}
						if !postSent && sawAdmission[i] >= rounds {
							postSent = true
							post <- struct{}{}
						}
					}
				}()
			}
			waitN := func(ch chan struct{}) {
				for range workers {
					select {
					case <-ch:
					case err := <-errs:
						close(stop)
						wg.Wait()
						t.Fatal(err)
					}
				}
			}
			waitN(pre)
			e.H.Activate(http.HandlerFunc(okHandler))
			waitN(post)
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// A readiness failure closes what was opened in reverse order, then the
// listener; nothing falls back, and a new dial is refused.
func TestReadinessFailure(t *testing.T) {
	var order events
	e := start(t, modeH1, host.Limits{}, func(c *host.Config) {
		c.WrapListener = func(l net.Listener) net.Listener {
			return &closeRecorder{Listener: l, OnClose: func() { order.Add("listener") }}
		}
	})
	addr := e.H.Addr().String()
	schemaErr := errors.New("schema: role has superuser (postgres://admin:SECRET@db)")
	err := e.H.Ready(context.Background(),
		host.Check{Name: "pool", Fn: func(context.Context) error {
			e.H.OnStop("pool", func(context.Context) error { order.Add("pool"); return nil })
			return nil
		}},
		host.Check{Name: "recovery", Fn: func(context.Context) error {
			e.H.OnStop("recovery", func(context.Context) error { order.Add("recovery"); return nil })
			return nil
		}},
		host.Check{Name: "schema", Fn: func(context.Context) error { return schemaErr }},
		host.Check{Name: "never", Fn: func(context.Context) error { t.Error("check after a failure ran"); return nil }},
	)
	if !errors.Is(err, schemaErr) || !strings.Contains(err.Error(), `"schema"`) {
		t.Fatalf("Ready error %v", err)
	}
	if got, want := order.Get(), []string{"recovery", "pool", "listener"}; !slices.Equal(got, want) {
		t.Fatalf("close order %v, want %v", got, want)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("dial succeeded after readiness failure")
	}
	e.H.Activate(http.HandlerFunc(okHandler))
	if e.H.IsReady() {
		t.Fatal("activated after readiness failure")
	}
	if err := e.H.Ready(context.Background()); !errors.Is(err, host.ErrStopped) {
		t.Fatalf("Ready after failure: %v", err)
	}
	if err := e.H.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after failed Ready: %v", err)
	}
	// A hook registered after cleanup runs at once rather than leaking.
	ran := false
	e.H.OnStop("late", func(context.Context) error { ran = true; return nil })
	if !ran {
		t.Fatal("late hook did not run")
	}
}

func TestReadinessCheckPanicsAndCancelledContext(t *testing.T) {
	e := start(t, modeH1, host.Limits{})
	err := e.H.Ready(context.Background(), host.Check{Name: "boom", Fn: func(context.Context) error { panic("SECRET") }})
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("Ready error %v", err)
	}

	e2 := start(t, modeH1, host.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e2.H.Ready(ctx, host.Check{Name: "x", Fn: func(context.Context) error { return nil }}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ready with cancelled ctx: %v", err)
	}
	if err := e2.H.Ready(context.Background()); !errors.Is(err, host.ErrStopped) {
		t.Fatalf("after: %v", err)
	}
}

func TestReadyBeforeStart(t *testing.T) {
	h, err := host.New(host.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Ready(context.Background()); !errors.Is(err, host.ErrNotStarted) {
		t.Fatalf("Ready before Start: %v", err)
	}
	h.Activate(http.HandlerFunc(okHandler))
	if h.IsReady() {
		t.Fatal("Activate before Start opened admission")
	}
	if h.Addr() != nil {
		t.Fatal("Addr before Start")
	}
	var ran bool
	h.OnStop("x", func(context.Context) error { ran = true; return nil })
	if err := h.Shutdown(context.Background()); err != nil || !ran {
		t.Fatalf("Shutdown before Start: %v ran=%v", err, ran)
	}
	if err := h.Start(); !errors.Is(err, host.ErrStopped) {
		t.Fatalf("Start after Shutdown: %v", err)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("Done not closed")
	}
}

func TestStartFailures(t *testing.T) {
	e := start(t, modeH1, host.Limits{})
	h, err := host.New(host.Config{Addr: e.H.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	var ran bool
	h.OnStop("pool", func(context.Context) error { ran = true; return nil })
	if err := h.Start(); err == nil || !ran {
		t.Fatalf("Start on a used port: err %v, hooks ran %v", err, ran)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err = host.New(host.Config{Listener: ln, WrapListener: func(net.Listener) net.Listener { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err == nil {
		t.Fatal("nil WrapListener accepted")
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("listener left open after failed Start")
	}
	if err := e.H.Start(); err == nil {
		t.Fatal("second Start accepted")
	}
}

// Cooperative drain: admission goes away synchronously, handlers see
// cancellation (cause ErrDraining), the drain waits for their real return,
// and only then stack → pools → listener close.
func TestCooperativeDrain(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			var order events
			e := start(t, m, host.Limits{}, func(c *host.Config) {
				c.WrapListener = func(l net.Listener) net.Listener {
					return &closeRecorder{Listener: l, OnClose: func() { order.Add("listener") }}
				}
			})
			e.H.OnStop("pool", func(context.Context) error { order.Add("pool"); return nil })
			e.H.OnStop("stack", func(context.Context) error { order.Add("stack"); return nil })
			const n = 3
			entered := make(chan struct{}, n)
			causes := make(chan error, n)
			finish := make(chan struct{})
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-r.Context().Done()
				causes <- context.Cause(r.Context())
				<-finish
				order.Add("handler")
				_, _ = io.WriteString(w, "finished")
			}))
			results := make(chan result, n)
			for range n {
				go func() {
					r, err := e.Try("GET", "/api/work", nil)
					if err != nil {
						r.Body = err.Error()
					}
					results <- r
				}()
			}
			for range n {
				<-entered
			}
			if e.H.InFlight() != n {
				t.Fatalf("InFlight %d", e.H.InFlight())
			}
			shut := make(chan error, 1)
			go func() { shut <- e.H.Shutdown(context.Background()) }()
			for range n {
				if c := <-causes; !errors.Is(c, host.ErrDraining) {
					t.Fatalf("handler cancel cause %v", c)
				}
			}
			// Drain has begun: not ready, new requests refused, nothing
			// closed yet, Shutdown still waiting for the handlers.
			if e.H.IsReady() {
				t.Fatal("ready during drain")
			}
			expect(t, "readyz during drain", e.Do("GET", "/readyz", nil), 503, "draining")
			expect(t, "api during drain", e.Do("GET", "/api/new", nil), 503, "draining")
			expect(t, "livez during drain", e.Do("GET", "/livez", nil), 200, "")
			select {
			case err := <-shut:
				t.Fatalf("Shutdown returned %v before handlers returned", err)
			default:
			}
			if got := order.Get(); len(got) != 0 {
				t.Fatalf("closed before handlers returned: %v", got)
			}
			close(finish)
			if err := <-shut; err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			want := []string{"handler", "handler", "handler", "stack", "pool", "listener"}
			if got := order.Get(); !slices.Equal(got, want) {
				t.Fatalf("order %v, want %v", got, want)
			}
			for range n {
				r := <-results
				if r.Status != 200 || r.Body != "finished" {
					t.Errorf("in-flight client got %d %q", r.Status, r.Body)
				}
			}
			select {
			case <-e.H.Done():
			default:
				t.Fatal("Done not closed after a clean drain")
			}
			if err := e.H.Shutdown(context.Background()); err != nil {
				t.Fatalf("second Shutdown: %v", err)
			}
		})
	}
}

// Non-cooperative drain: a handler that ignores cancellation makes Shutdown
// report a typed drain timeout; cleanup still runs in reverse order; the
// straggler's return is still accounted for (Done, goleak).
func TestNonCooperativeDrain(t *testing.T) {
	for _, m := range []mode{modeH1, modeH2} {
		t.Run(m.Name, func(t *testing.T) {
			var order events
			e := start(t, m, host.Limits{DrainTimeout: 100 * time.Millisecond}, func(c *host.Config) {
				c.WrapListener = func(l net.Listener) net.Listener {
					return &closeRecorder{Listener: l, OnClose: func() { order.Add("listener") }}
				}
			})
			e.H.OnStop("pool", func(context.Context) error { order.Add("pool"); return nil })
			e.H.OnStop("stack", func(context.Context) error { order.Add("stack"); return nil })
			entered := make(chan struct{})
			release := make(chan struct{})
			returned := make(chan struct{})
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(returned)
				close(entered)
				<-release // ignores r.Context()
			}))
			clientDone := make(chan struct{})
			go func() {
				defer close(clientDone)
				_, _ = e.Try("GET", "/api/stuck", nil)
			}()
			<-entered
			err := e.H.Shutdown(context.Background())
			var dte *host.DrainTimeoutError
			if !errors.Is(err, host.ErrDrainTimeout) || !errors.As(err, &dte) || dte.InFlight != 1 {
				t.Fatalf("Shutdown: %v", err)
			}
			if got, want := order.Get(), []string{"stack", "pool", "listener"}; !slices.Equal(got, want) {
				t.Fatalf("cleanup order %v, want %v", got, want)
			}
			if e.H.InFlight() != 1 {
				t.Fatalf("InFlight %d after timeout", e.H.InFlight())
			}
			select {
			case <-e.H.Done():
				t.Fatal("Done closed while a handler still runs")
			default:
			}
			if err2 := e.H.Shutdown(context.Background()); !errors.Is(err2, host.ErrDrainTimeout) {
				t.Fatalf("second Shutdown must report the same unclean stop: %v", err2)
			}
			close(release)
			<-returned
			<-e.H.Done()
			if e.H.InFlight() != 0 {
				t.Fatalf("InFlight %d after straggler returned", e.H.InFlight())
			}
			<-clientDone
		})
	}
}

// The caller's context can end the drain early; the result is still the
// typed drain-timeout error.
func TestDrainCallerContext(t *testing.T) {
	e := start(t, modeH1, host.Limits{DrainTimeout: host.MaxDrainTimeout})
	entered, release := make(chan struct{}), make(chan struct{})
	e.H.Activate(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { close(entered); <-release }))
	done := make(chan struct{})
	go func() { defer close(done); _, _ = e.Try("GET", "/api/x", nil) }()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.H.Shutdown(ctx)
	if !errors.Is(err, host.ErrDrainTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: %v", err)
	}
	close(release)
	<-e.H.Done()
	<-done
}

func TestStopHookErrorsAreReported(t *testing.T) {
	e := start(t, modeH1, host.Limits{})
	e.H.OnStop("pool", func(context.Context) error { return errors.New("close failed") })
	e.H.OnStop("stack", func(context.Context) error { panic("SECRET") })
	e.H.Activate(http.HandlerFunc(okHandler))
	err := e.H.Shutdown(context.Background())
	if err == nil || errors.Is(err, host.ErrDrainTimeout) || !strings.Contains(err.Error(), `"pool"`) ||
		!strings.Contains(err.Error(), `"stack"`) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("Shutdown: %v", err)
	}
}

// Drain under continuous load: every admitted handler blocks until its
// context is cancelled, with a request timeout far beyond the test, so a
// handler the drain failed to cancel would surface as a drain timeout.
func TestDrainUnderLoadCancelsEveryHandler(t *testing.T) {
	for _, m := range []mode{modeH1, modeH2} {
		t.Run(m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{RequestTimeout: time.Hour, DrainTimeout: 5 * time.Second, MaxInFlight: 10000})
			entered := make(chan struct{}, 1000)
			e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-r.Context().Done()
			}))
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := e.Try("GET", "/api/x", nil); err != nil {
							return
						}
					}
				}()
			}
			for range 8 {
				<-entered
			}
			err := e.H.Shutdown(context.Background())
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("Shutdown under load: %v", err)
			}
		})
	}
}

// Several request timeouts on one HTTP/2 connection share a registry
// shard and its timer; a request finishing early does not disturb the
// others' timeouts.
func TestTimeoutsOnOneConnection(t *testing.T) {
	e := start(t, modeH2, host.Limits{RequestTimeout: 30 * time.Millisecond})
	causes := make(chan error, 4)
	e.H.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/fast" {
			_, _ = io.WriteString(w, "fast")
			return
		}
		<-r.Context().Done()
		causes <- context.Cause(r.Context())
	}))
	expect(t, "warm-up", e.Do("GET", "/api/fast", nil), 200, "") // one connection for all
	results := make(chan result, 4)
	for _, p := range []string{"/api/slow", "/api/fast", "/api/slow", "/api/slow"} {
		go func() {
			r, err := e.Try("GET", p, nil)
			if err != nil {
				r.Body = err.Error()
			}
			results <- r
		}()
	}
	var timeouts, fast int
	for range 4 {
		r := <-results
		switch {
		case r.Status == 504 && r.Code == "timeout":
			timeouts++
		case r.Status == 200 && r.Body == "fast":
			fast++
		default:
			t.Fatalf("unexpected %d %q", r.Status, r.Body)
		}
	}
	if timeouts != 3 || fast != 1 {
		t.Fatalf("timeouts %d fast %d", timeouts, fast)
	}
	for range 3 {
		if c := <-causes; !errors.Is(c, host.ErrRequestTimeout) {
			t.Fatalf("cause %v", c)
		}
	}
	if d := e.Dials.Load(); d != 1 {
		t.Fatalf("requests used %d connections, want 1", d)
	}
}
