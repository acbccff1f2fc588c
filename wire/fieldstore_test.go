package wire

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"
	"unsafe"
)

// storeWriter is a reusedWriter that lends storage for header values
// (FieldStore), as the fast engine's exchange does; with full set it
// has no room for any.
type storeWriter struct {
	reusedWriter
	buf   [192]byte
	used  int
	vals  [8]string
	slots int
	full  bool
	body  []byte
}

func (w *storeWriter) FieldValues(size, n int) ([]byte, []string, bool) {
	if w.full || size > len(w.buf)-w.used || n > len(w.vals)-w.slots {
		return nil, nil, false
	}
	buf := w.buf[w.used : w.used+size : w.used+size]
	w.used += size
	vals := w.vals[w.slots : w.slots+n : w.slots+n]
	clear(vals)
	w.slots += n
	return buf, vals, true
}

func (w *storeWriter) Write(b []byte) (int, error) {
	w.body = append(w.body, b...)
	return w.reusedWriter.Write(b)
}

// reset prepares w for the next answer, as the exchange's Reset does.
func (w *storeWriter) reset() {
	clear(w.h)
	w.used, w.slots, w.body, w.status = 0, 0, w.body[:0], 0
}

// inStore reports whether s lies in w's storage.
func (w *storeWriter) inStore(s string) bool {
	if s == "" {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	lo := uintptr(unsafe.Pointer(&w.buf[0]))
	return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(w.buf))
}

// Answers written to a writer that lends storage for header values
// (FieldStore) are the answers written to any other: the same status,
// fields and body, whether the store has room (the values then live in
// it) or not (they are allocated).
func TestFieldStoreAnswersAlike(t *testing.T) {
	answers := map[string]func(w http.ResponseWriter){
		"problem with Retry-After": func(w http.ResponseWriter) {
			p := New(CodeLoginRateLimitExceeded)
			p.RetryAfter = 42
			p.Extra = map[string]any{"errorCode": CodeLoginRateLimitExceeded}
			Write(w, p)
		},
		"problem without Retry-After": func(w http.ResponseWriter) { Write(w, New(CodeInvalidBody)) },
		"rate-limited": func(w http.ResponseWriter) {
			SetRateLimitOn(w, RateLimit{Policy: "api", Limit: 10, Window: time.Minute, Remaining: -1, Reset: 1500 * time.Millisecond})
			p := New(CodeRateLimited)
			p.RetryAfter = 2
			Write(w, p)
		},
		"undisclosed policy": func(w http.ResponseWriter) {
			SetRateLimitOn(w, RateLimit{Policy: "shield", Reset: 7 * time.Second})
			Write(w, New(CodeRateLimited))
		},
		"closing": func(w http.ResponseWriter) {
			WriteClose(w, nil, New(CodeRateLimited))
		},
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			rec.Header()[RequestIDField] = []string{"4bf92f3577b34da6a3ce929d0e0e4736"}
			answer(rec)
			for _, full := range []bool{false, true} {
				w := &storeWriter{reusedWriter: reusedWriter{h: make(http.Header)}, full: full}
				for range 2 { // the second answer reuses the storage
					w.reset()
					w.h[RequestIDField] = []string{"4bf92f3577b34da6a3ce929d0e0e4736"}
					answer(w)
					if w.status != rec.Code || string(w.body) != rec.Body.String() {
						t.Fatalf("full=%v: status %d body %q, want %d %q", full, w.status, w.body, rec.Code, rec.Body.String())
					}
					if !reflect.DeepEqual(w.h, rec.Header()) {
						t.Fatalf("full=%v: fields %q, want %q", full, w.h, rec.Header())
					}
				}
				cl := w.h.Get("Content-Length")
				if got := w.inStore(cl); got == full {
					t.Errorf("full=%v: Content-Length value in the writer's storage: %v", full, got)
				}
			}
		})
	}
}

// The values of neighbouring fields made from one store cannot run
// into each other: appending to one field's slice leaves the next
// field's value alone.
func TestValuesAppendSafe(t *testing.T) {
	w := &storeWriter{reusedWriter: reusedWriter{h: make(http.Header)}}
	SetRateLimitOn(w, RateLimit{Policy: "p", Limit: 3, Window: time.Second})
	w.h.Add("Ratelimit-Policy", "extra")
	if got := w.h.Values("Ratelimit"); len(got) != 1 || got[0] != `"p";r=0;t=0` {
		t.Fatalf("RateLimit %q after appending to RateLimit-Policy", got)
	}
	if got := w.h.Values("Ratelimit-Policy"); len(got) != 2 || got[0] != `"p";q=3;w=1` || got[1] != "extra" {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if s, vals := HeaderValues(nil, []byte("ab"), 2); s != "ab" || len(vals) != 2 || cap(vals) != 2 {
		t.Fatalf("HeaderValues(nil) = %q, %d/%d slots", s, len(vals), cap(vals))
	}
}

// A refusal (problem with Retry-After, the RateLimit fields) written to
// a writer that lends storage for its values allocates nothing.
func TestNoRaceFieldStoreAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items; scripts/test runs this without -race")
	}
	w := &storeWriter{reusedWriter: reusedWriter{h: make(http.Header)}}
	p := New(CodeLoginRateLimitExceeded)
	p.RetryAfter = 120
	p.Extra = map[string]any{"errorCode": CodeLoginRateLimitExceeded}
	rl := RateLimit{Policy: "login", Limit: 5, Window: time.Minute, Reset: 120 * time.Second}
	id := []string{"4bf92f3577b34da6a3ce929d0e0e4736"}
	answer := func() {
		w.reset()
		w.h[RequestIDField] = id
		SetRateLimitOn(w, rl)
		Write(w, p)
	}
	answer() // warm the pool
	allocs := testing.AllocsPerRun(200, answer)
	if w.status != 429 || len(w.body) == 0 || w.slots != 4 {
		t.Fatalf("status %d, %d body bytes, %d slots used", w.status, len(w.body), w.slots)
	}
	t.Logf("%.0f allocations per answer", allocs)
	if allocs != 0 {
		t.Fatalf("%.0f allocations per answer, want 0", allocs)
	}
}
