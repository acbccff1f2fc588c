package control_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
)

// BenchmarkRefuseForeignHost measures the answer to a request refused
// by the Host check (before authentication), and BenchmarkStatus an
// authenticated GET /v1/status, both without a network.
func BenchmarkRefuseForeignHost(b *testing.B) {
	h := benchHandler(b)
	req := httptest.NewRequest("GET", "http://attacker.example/v1/status", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 403 {
			b.Fatal(rec.Code)
		}
	}
}

func BenchmarkStatus(b *testing.B) {
	h := benchHandler(b)
	req := httptest.NewRequest("GET", "http://127.0.0.1:9091/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

func benchHandler(b *testing.B) http.Handler {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 16})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 16})
	h, err := control.New(control.Config{Allow: allow, Deny: deny, Token: token, Addr: "127.0.0.1:9091",
		Status: func() any { return map[string]any{"state": "ready"} }})
	if err != nil {
		b.Fatal(err)
	}
	return h
}
