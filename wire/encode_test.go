package wire

import (
	"net/http"
	"testing"
)

// The direct encoder must write exactly what encoding/json writes, for
// every problem it takes (the wire contract tests compare registered
// answers byte for byte; this covers arbitrary members).
func FuzzDirectEncodingMatchesJSON(f *testing.F) {
	f.Add(429, "rate_limited", "Too Many Requests", "", "about:blank", int64(3), "errorCode", "rate-limit-exceeded", int64(0), false)
	f.Add(403, "blocked", "Forbidden", "The client is blocked.", "about:blank", int64(0), "", "", int64(7), true)
	f.Add(400, "a<b", "t\"", "d\\", "x&y", int64(-1), "aaa", "\u2028", int64(-5), false)
	f.Add(503, "code", "status", "é", "type", int64(1), "retryAfter", "v", int64(1), true)
	f.Fuzz(func(t *testing.T, status int, code, title, detail, typ string, retry int64, key, sval string, ival int64, withBool bool) {
		p := Problem{Status: status, Code: code, Title: title, Detail: detail, Type: typ, RetryAfter: retry}
		if key != "" {
			p.Extra = map[string]any{key: sval, key + "_n": ival}
			if withBool {
				p.Extra[key+"_b"] = true
			}
		}
		for _, id := range []string{"", "4bf92f3577b34da6a3ce929d0e0e4736", "edge-1:a/b+c="} {
			want, wantOK := p.appendJSON(nil, id)
			got, ok := p.appendDirect(nil, id)
			if ok && (!wantOK || string(got) != string(want)) {
				t.Fatalf("direct %q (ok), encoding/json %q (ok=%v)", got, want, wantOK)
			}
			all, allOK := p.appendTo(nil, id)
			if string(all) != string(want) || allOK != wantOK {
				t.Fatalf("appendTo %q (%v), encoding/json %q (%v)", all, allOK, want, wantOK)
			}
		}
	})
}

// Registered codes, with and without Retry-After and the login layer's
// errorCode member, take the direct path (no encoding/json).
func TestRegisteredProblemsEncodeDirectly(t *testing.T) {
	for _, code := range Codes() {
		for _, p := range []Problem{New(code), {Status: 429, Code: code, RetryAfter: 17, Extra: map[string]any{"errorCode": code}}} {
			p = p.complete()
			got, ok := p.appendDirect(nil, "4bf92f3577b34da6a3ce929d0e0e4736")
			want, _ := p.appendJSON(nil, "4bf92f3577b34da6a3ce929d0e0e4736")
			if !ok {
				t.Errorf("%s: not encoded directly (detail %q)", code, p.Detail)
				continue
			}
			if string(got) != string(want) {
				t.Errorf("%s: direct %q, encoding/json %q", code, got, want)
			}
		}
	}
}

// reusedWriter is a ResponseWriter whose header map is kept between
// answers, as a server's connection keeps it.
type reusedWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *reusedWriter) Header() http.Header { return w.h }
func (w *reusedWriter) WriteHeader(s int)   { w.status = s }
func (w *reusedWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}

// A rejection under a flood is cheap: Write allocates only the values of
// Content-Length and Retry-After (one string, one array), whatever the
// body: the body is encoded into a pooled buffer, the constant fields are
// shared. (encoding/json and http.Header.Set made it 31.)
// Named NoRace: scripts/test's allocation pass runs it without -race.
func TestNoRaceWriteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items; scripts/test runs this without -race")
	}
	w := &reusedWriter{h: make(http.Header)}
	p := New(CodeLoginRateLimitExceeded)
	p.RetryAfter = 120
	p.Extra = map[string]any{"errorCode": CodeLoginRateLimitExceeded}
	Write(w, p)                                        // warm the pool
	id := []string{"4bf92f3577b34da6a3ce929d0e0e4736"} // the host's request ID: repeated in the body
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		w.h[RequestIDField] = id
		Write(w, p)
	})
	if w.status != 429 || w.n == 0 {
		t.Fatalf("status %d, %d body bytes", w.status, w.n)
	}
	// One string holds the Content-Length and Retry-After values, one
	// array their slices.
	t.Logf("%.0f allocations per answer", allocs)
	if allocs > 2 {
		t.Fatalf("Write allocated %.0f times per answer, want at most 2", allocs)
	}
}

// BenchmarkProblemBody encodes the body of a login refusal (a retry
// time, a request ID and one extra member), as a flood's answers are.
func BenchmarkProblemBody(b *testing.B) {
	p := New(CodeLoginRateLimitExceeded)
	p.RetryAfter = 60
	p.Extra = map[string]any{"errorCode": "rate-limit-exceeded"}
	p = p.complete()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := p.appendTo(buf[:0], "4bf92f3577b34da6a3ce929d0e0e4736"); !ok {
			b.Fatal("not encoded")
		}
	}
}
