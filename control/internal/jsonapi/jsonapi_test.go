package jsonapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/control/internal/jsonapi"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/wire"
)

// secret is planted in handler errors and panics; it must never reach a
// response.
const secret = "SECRET-7f3a postgres://app:hunter2@db:5432/prod SELECT * FROM api_keys"

// marker is planted in request payloads; error bodies must never echo it.
const marker = "PAYLOAD-MARKER-91c2"

// problemErr is a handler error that chooses its answer.
type problemErr struct {
	p   wire.Problem
	err error
}

func (e *problemErr) Error() string         { return e.err.Error() }
func (e *problemErr) Problem() wire.Problem { return e.p }

type jsonEnv struct {
	*env
	mu     sync.Mutex
	errors map[string]error // code → last error given to OnError
}

func (j *jsonEnv) lastErr(code string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.errors[code]
}

func startJSON(t *testing.T, m mode, lim host.Limits, extra map[string]jsonapi.Handler) *jsonEnv {
	t.Helper()
	j := &jsonEnv{errors: map[string]error{}}
	routes := map[string]jsonapi.Handler{
		"POST /api/echo": func(_ context.Context, _ *http.Request, body json.RawMessage) (int, any, error) {
			return http.StatusOK, map[string]json.RawMessage{"got": body}, nil
		},
		"GET /api/items/{id}": func(_ context.Context, r *http.Request, _ json.RawMessage) (int, any, error) {
			return http.StatusOK, map[string]string{"id": r.PathValue("id")}, nil
		},
		"DELETE /api/items/{id}": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			return http.StatusNoContent, nil, nil
		},
		"POST /api/typed": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			return 0, nil, &problemErr{p: wire.Problem{Status: 409, Code: "conflict", Detail: "Already exists", RetryAfter: 2, Extra: map[string]any{"leak": secret}}, err: errors.New(secret)}
		},
		"POST /api/typed-bad": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			return 0, nil, &problemErr{p: wire.Problem{Status: 422, Code: "Bad Code!", Title: secret, Detail: "title with " + secret + strings.Repeat("x", 200)}, err: errors.New(secret)}
		},
		"POST /api/plain": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			return 0, nil, errors.New(secret)
		},
		"POST /api/panic": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			panic(secret)
		},
		"POST /api/big": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			return http.StatusOK, strings.Repeat("x", 4096), nil
		},
		"POST /api/badstatus": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			return http.StatusNotFound, map[string]string{"leak": secret}, nil
		},
		"POST /api/unencodable": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			return http.StatusOK, map[string]any{"f": func() {}}, nil
		},
	}
	for k, v := range extra {
		routes[k] = v
	}
	hd, err := jsonapi.New(jsonapi.Config{
		Prefix:           "/api",
		Methods:          []string{"GET", "POST", "DELETE"},
		MaxBodyBytes:     256,
		MaxResponseBytes: 1024,
		OnError: func(_ context.Context, code string, err error) {
			j.mu.Lock()
			j.errors[code] = err
			j.mu.Unlock()
		},
	}, routes)
	if err != nil {
		t.Fatal(err)
	}
	j.env = start(t, m, lim)
	j.H.Activate(hd)
	return j
}

func checkClean(t *testing.T, what string, r result) {
	t.Helper()
	if strings.Contains(r.Body, "SECRET") || strings.Contains(r.Body, "postgres") ||
		strings.Contains(r.Body, "SELECT") || strings.Contains(r.Body, marker) || strings.Contains(r.Body, "goroutine") {
		t.Fatalf("%s: error body leaks: %s", what, r.Body)
	}
}

// Each bad input produces its status and stable code; no error body
// carries the handler's error text, a panic value or the payload.
func TestJSONBadInputs(t *testing.T) {
	const ct = "application/json"
	type tc struct {
		name, method, path string
		body               string // "" = none
		streamed           bool   // unknown length (chunked)
		hdr                []string
		status             int
		code               string
		closes             bool // HTTP/1.1 connection closed (rejected before the body was read)
	}
	big := `"` + strings.Repeat(marker, 20) + `"`
	cases := []tc{
		{"wrong content type", "POST", "/api/echo", `{"a":"` + marker + `"}`, false, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", true},
		{"missing content type", "POST", "/api/echo", `{}`, false, nil, 415, "unsupported_media_type", true},
		{"json with foreign charset", "POST", "/api/echo", `{}`, false, []string{"Content-Type", "application/json; charset=latin1"}, 415, "unsupported_media_type", true},
		{"compressed body", "POST", "/api/echo", "\x1f\x8b" + marker, false, []string{"Content-Type", ct, "Content-Encoding", "gzip"}, 415, "unsupported_content_encoding", true},
		{"oversized body", "POST", "/api/echo", big, false, []string{"Content-Type", ct}, 413, "payload_too_large", true},
		{"oversized streamed body", "POST", "/api/echo", big, true, []string{"Content-Type", ct}, 413, "payload_too_large", true},
		{"invalid json", "POST", "/api/echo", `{"a":"` + marker + `"`, false, []string{"Content-Type", ct}, 400, "invalid_json", false},
		{"invalid streamed json", "POST", "/api/echo", `{"a":"` + marker + `"`, true, []string{"Content-Type", ct}, 400, "invalid_json", false},
		{"two json values", "POST", "/api/echo", `{} {"` + marker + `":1}`, false, []string{"Content-Type", ct}, 400, "invalid_json", false},
		{"typed handler error", "POST", "/api/typed", "", false, nil, 409, "conflict", false},
		{"typed error with invalid code and title", "POST", "/api/typed-bad", "", false, nil, 422, "invalid_request", false},
		{"plain handler error", "POST", "/api/plain", `{"p":"` + marker + `"}`, false, []string{"Content-Type", ct}, 500, "internal", false},
		{"handler panic", "POST", "/api/panic", "", false, nil, 500, "internal", false},
		{"oversized response", "POST", "/api/big", "", false, nil, 500, "response_too_large", false},
		{"non-2xx without error", "POST", "/api/badstatus", "", false, nil, 500, "internal", false},
		{"unencodable response", "POST", "/api/unencodable", "", false, nil, 500, "internal", false},
		{"unknown route", "POST", "/api/nope", "", false, nil, 404, "not_found", true},
		{"outside prefix", "GET", "/other", "", false, nil, 404, "not_found", true},
		{"prefix look-alike", "GET", "/apix/items/1", "", false, nil, 404, "not_found", true},
		{"unclean path", "GET", "/api/items/../items/1", "", false, nil, 404, "not_found", true},
		{"method not in the list", "PUT", "/api/echo", "", false, nil, 405, "method_not_allowed", true},
		{"method not for this path", "GET", "/api/echo", "", false, nil, 405, "method_not_allowed", true},
	}
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			j := startJSON(t, m, host.Limits{}, nil)
			for _, c := range cases {
				var body io.Reader
				if c.body != "" {
					body = strings.NewReader(c.body)
					if c.streamed {
						body = io.MultiReader(body)
					}
				}
				r := j.Do(c.method, c.path, body, c.hdr...)
				j.CheckProto(r)
				expect(t, c.name, r, c.status, c.code)
				checkClean(t, c.name, r)
				if !m.H2() && r.Close != c.closes {
					t.Errorf("%s: connection close %v, want %v", c.name, r.Close, c.closes)
				}
			}
			// Allow headers.
			r := j.Do("PUT", "/api/echo", nil)
			if r.Header.Get("Allow") != "DELETE, GET, POST" {
				t.Errorf("Allow for PUT: %q", r.Header.Get("Allow"))
			}
			r = j.Do("GET", "/api/echo", nil)
			if r.Header.Get("Allow") != "POST" {
				t.Errorf("Allow for GET /api/echo: %q", r.Header.Get("Allow"))
			}
			// The typed error keeps its title and Retry-After; the owner
			// still gets the real error through OnError.
			r = j.Do("POST", "/api/typed", nil)
			var p map[string]any
			_ = json.Unmarshal([]byte(r.Body), &p)
			if p["detail"] != "Already exists" || r.Header.Get("Retry-After") != "2" {
				t.Errorf("typed: %v Retry-After %q", p, r.Header.Get("Retry-After"))
			}
			if err := j.lastErr("conflict"); err == nil || !strings.Contains(err.Error(), "SECRET") {
				t.Errorf("OnError did not receive the handler's error: %v", err)
			}
			var pe *jsonapi.PanicError
			if err := j.lastErr("internal"); err == nil {
				t.Error("OnError not called for internal")
			} else if j.Do("POST", "/api/panic", nil); !errors.As(j.lastErr("internal"), &pe) || pe.Value != secret {
				t.Errorf("OnError for panic: %v", j.lastErr("internal"))
			}
			if j.H.InFlight() != 0 {
				t.Errorf("InFlight %d", j.H.InFlight())
			}
		})
	}
}

func TestJSONSuccess(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			j := startJSON(t, m, host.Limits{}, nil)
			r := j.Do("POST", "/api/echo", strings.NewReader(`{"a":[1,2,3]}`), "Content-Type", "application/json; charset=UTF-8")
			if r.Status != 200 || r.Body != `{"got":{"a":[1,2,3]}}`+"\n" || r.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("echo: %d %q %q", r.Status, r.Body, r.Header.Get("Content-Type"))
			}
			if r.Close {
				t.Error("success closed the connection")
			}
			r = j.Do("POST", "/api/echo", nil)
			if r.Status != 200 || r.Body != `{"got":null}`+"\n" {
				t.Fatalf("no body: %d %q", r.Status, r.Body)
			}
			r = j.Do("GET", "/api/items/42", nil)
			if r.Status != 200 || r.Body != `{"id":"42"}`+"\n" {
				t.Fatalf("path value: %d %q", r.Status, r.Body)
			}
			if r = j.Do("DELETE", "/api/items/42", nil); r.Status != 204 || r.Body != "" {
				t.Fatalf("delete: %d %q", r.Status, r.Body)
			}
			if r = j.Do("HEAD", "/api/items/7", nil); r.Status != 405 {
				t.Fatalf("HEAD not in the method list: %d", r.Status)
			}
		})
	}
}

// Malformed framing over a raw HTTP/1.1 socket.
func TestJSONFramingH1(t *testing.T) {
	j := startJSON(t, modeH1, host.Limits{}, nil)

	// An invalid Content-Length never reaches the host: net/http answers a
	// plain 400 and closes.
	rc := dialRaw(t, j.env)
	rc.Send("POST /api/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12abc\r\n\r\n{}")
	r := rc.Read("POST")
	if r.Status != 400 || !r.Close {
		t.Fatalf("invalid Content-Length: %d close=%v", r.Status, r.Close)
	}
	rc.ExpectEOF()

	// A body shorter than announced (the client half-closes).
	rc = dialRaw(t, j.env)
	rc.Send("POST /api/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"" + marker + "\":")
	_ = rc.C.(interface{ CloseWrite() error }).CloseWrite()
	r = rc.Read("POST")
	expect(t, "short body", r, 400, "invalid_content_length")
	checkClean(t, "short body", r)
	rc.ExpectEOF()

	// After a fully read bad body the connection stays usable.
	rc = dialRaw(t, j.env)
	rc.Send("POST /api/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n{{{")
	expect(t, "invalid json", rc.Read("POST"), 400, "invalid_json")
	rc.Send("GET /api/items/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	if r := rc.Read("GET"); r.Status != 200 {
		t.Fatalf("keep-alive after invalid_json: %d", r.Status)
	}
}

// At the request timeout the client gets 504 at once, but the slot (and
// the drain) waits for the handler's real return.
func TestJSONTimeoutAwaitsHandler(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			entered := make(chan error, 1)
			finish := make(chan struct{})
			var order events
			j := startJSON(t, m, host.Limits{RequestTimeout: 20 * time.Millisecond}, map[string]jsonapi.Handler{
				"POST /api/slow": func(ctx context.Context, _ *http.Request, _ json.RawMessage) (int, any, error) {
					<-ctx.Done()
					entered <- context.Cause(ctx)
					<-finish
					order.Add("handler returned")
					return http.StatusOK, "too late", nil
				},
			})
			j.H.OnStop("stack", func(context.Context) error { order.Add("stack"); return nil })
			r := j.Do("POST", "/api/slow", nil)
			expect(t, "slow", r, 504, "timeout")
			if c := <-entered; !errors.Is(c, host.ErrRequestTimeout) {
				t.Fatalf("cause %v", c)
			}
			if j.H.InFlight() != 1 {
				t.Fatalf("InFlight %d after the 504: the handler still runs", j.H.InFlight())
			}
			shut := make(chan error, 1)
			go func() { shut <- j.H.Shutdown(context.Background()) }()
			close(finish)
			if err := <-shut; err != nil {
				t.Fatal(err)
			}
			if got := order.Get(); len(got) != 2 || got[0] != "handler returned" || got[1] != "stack" {
				t.Fatalf("order %v", got)
			}
		})
	}
}

// At drain the client gets 503 draining at once; Shutdown still waits for
// the handler.
func TestJSONDrainAnswersEarly(t *testing.T) {
	entered := make(chan struct{})
	finish := make(chan struct{})
	var order events
	j := startJSON(t, modeH1, host.Limits{}, map[string]jsonapi.Handler{
		"POST /api/slow": func(ctx context.Context, _ *http.Request, _ json.RawMessage) (int, any, error) {
			close(entered)
			<-ctx.Done()
			<-finish
			order.Add("handler returned")
			return 0, nil, ctx.Err()
		},
	})
	j.H.OnStop("pool", func(context.Context) error { order.Add("pool"); return nil })
	got := make(chan result, 1)
	go func() { r, _ := j.Try("POST", "/api/slow", nil); got <- r }()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- j.H.Shutdown(context.Background()) }()
	r := <-got // answered before the handler returned
	expect(t, "drained", r, 503, "draining")
	if len(order.Get()) != 0 {
		t.Fatalf("cleanup ran before the handler returned: %v", order.Get())
	}
	close(finish)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if got := order.Get(); len(got) != 2 || got[0] != "handler returned" {
		t.Fatalf("order %v", got)
	}
}

func TestJSONConfigErrors(t *testing.T) {
	ok := func(context.Context, *http.Request, json.RawMessage) (int, any, error) { return 200, nil, nil }
	type routes = map[string]jsonapi.Handler
	cfg := func(prefix string, methods ...string) jsonapi.Config {
		return jsonapi.Config{Prefix: prefix, Methods: methods, MaxBodyBytes: 1024, MaxResponseBytes: 1024}
	}
	cases := []struct {
		name   string
		cfg    jsonapi.Config
		routes routes
		want   string
	}{
		{"no prefix", cfg(""), routes{"GET /x": ok}, "prefix"},
		{"relative prefix", cfg("api"), routes{"GET /api": ok}, "prefix"},
		{"unclean prefix", cfg("/api/../x"), routes{"GET /x": ok}, "prefix"},
		{"no body bound", jsonapi.Config{Prefix: "/api", MaxResponseBytes: 1}, routes{"GET /api/x": ok}, "max_body_bytes 0 out of range [1, 67108864]"},
		{"negative body bound", jsonapi.Config{Prefix: "/api", MaxBodyBytes: -1, MaxResponseBytes: 1}, routes{"GET /api/x": ok}, "max_body_bytes -1 out of range [1, 67108864]"},
		{"response bound", jsonapi.Config{Prefix: "/api", MaxBodyBytes: 1, MaxResponseBytes: 1 << 40}, routes{"GET /api/x": ok}, "max_response_bytes"},
		{"no routes", cfg("/api"), nil, "routes is empty"},
		{"bad method", cfg("/api", "TRACE"), routes{"GET /api/x": ok}, "methods"},
		{"route method not listed", cfg("/api", "GET"), routes{"POST /api/x": ok}, "not in methods"},
		{"route outside prefix", cfg("/api"), routes{"GET /other": ok}, "under"},
		{"route trailing slash", cfg("/api"), routes{"GET /api/x/": ok}, "end in"},
		{"route without method", cfg("/api"), routes{"/api/x": ok}, "METHOD /path"},
		{"nil handler", cfg("/api"), routes{"GET /api/x": nil}, "no handler"},
		{"conflicting patterns", cfg("/api"), routes{"GET /api/{a}/x": ok, "GET /api/y/{b}": ok}, "conflicting"},
	}
	for _, c := range cases {
		_, err := jsonapi.New(c.cfg, c.routes)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "jsonapi: ") {
			t.Errorf("%s: %v (want %q)", c.name, err, c.want)
		}
	}
}
