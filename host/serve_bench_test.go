package host

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkServeInMemory isolates the host's own per-request work (bounds,
// admission, contexts, wrappers) from the network: the same handler called
// directly and through the host's root handler.
func BenchmarkServeInMemory(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	req := httptest.NewRequest("GET", "/api/x", nil)
	b.Run("bare", func(b *testing.B) {
		w := httptest.NewRecorder()
		b.ReportAllocs()
		for b.Loop() {
			w.Body.Reset()
			handler.ServeHTTP(w, req)
		}
	})
	b.Run("host", func(b *testing.B) {
		h, err := New(Config{Addr: "127.0.0.1:0"})
		if err != nil {
			b.Fatal(err)
		}
		h.started = true // admission without a listener
		h.Activate(handler)
		w := httptest.NewRecorder()
		b.ReportAllocs()
		for b.Loop() {
			w.Body.Reset()
			h.ls[0].serve(w, req)
		}
	})
}
