package jsonapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bulwarkhq/bulwark/control/internal/jsonapi"
	"github.com/bulwarkhq/bulwark/wire"
)

// fixedCodes is every code the JSON mode can send for client input.
var fixedCodes = map[string]bool{
	"not_found":                    true,
	"method_not_allowed":           true,
	"unsupported_media_type":       true,
	"unsupported_content_encoding": true,
	"payload_too_large":            true,
	"invalid_json":                 true,
	"invalid_content_length":       true,
	"invalid_request":              true,
}

// FuzzJSONRequest feeds arbitrary method, path, media type, encoding and
// body through the JSON mode. Every answer is either the handler's success
// or a fixed problem whose members never depend on the input.
func FuzzJSONRequest(f *testing.F) {
	f.Add(uint8(0), "/api/echo", "application/json", "", []byte(`{"a":1}`), false)
	f.Add(uint8(0), "/api/echo", "application/json; charset=utf-8", "identity", []byte(`[1,2]`), true)
	f.Add(uint8(0), "/api/echo", "text/plain", "", []byte(`{}`), false)
	f.Add(uint8(0), "/api/echo", "application/json", "gzip, identity", []byte("\x1f\x8b"), false)
	f.Add(uint8(0), "/api/echo", "application/json", "", []byte(`{"a":`), false)
	f.Add(uint8(1), "/api/items/7", "", "", []byte(nil), false)
	f.Add(uint8(2), "/api/../etc", "application/json", "", []byte(`1`), false)
	f.Add(uint8(3), "/api/echo", "application/json;;", "", bytes.Repeat([]byte("a"), 300), true)
	hd, err := jsonapi.New(jsonapi.Config{Prefix: "/api", MaxBodyBytes: 256, MaxResponseBytes: 1024}, map[string]jsonapi.Handler{
		"POST /api/echo": func(_ context.Context, _ *http.Request, body json.RawMessage) (int, any, error) {
			return 200, map[string]int{"len": len(body)}, nil
		},
		"GET /api/items/{id}": func(context.Context, *http.Request, json.RawMessage) (int, any, error) {
			return 200, "item", nil
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	methods := []string{"POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"}
	f.Fuzz(func(t *testing.T, mi uint8, path, ct, ce string, body []byte, streamed bool) {
		if len(path) == 0 || path[0] != '/' {
			path = "/" + path
		}
		var rd io.Reader = bytes.NewReader(body)
		if streamed {
			rd = io.MultiReader(rd)
		}
		req, err := http.NewRequest(methods[int(mi)%len(methods)], "http://x"+path, rd)
		if err != nil {
			return // not a request a server could receive
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if ce != "" {
			req.Header.Set("Content-Encoding", ce)
		}
		rec := httptest.NewRecorder()
		hd.ServeHTTP(rec, req)
		if rec.Code == 200 {
			return
		}
		if got := rec.Header().Get("Content-Type"); got != "application/problem+json" {
			t.Fatalf("status %d with content type %q", rec.Code, got)
		}
		var p map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("problem body is not JSON: %q", rec.Body.String())
		}
		code, _ := p["code"].(string)
		_, detail, _ := wire.Lookup(code)
		if !fixedCodes[code] || p["title"] != http.StatusText(rec.Code) || p["detail"] != detail || p["type"] != "about:blank" || p["status"] != float64(rec.Code) {
			t.Fatalf("unexpected problem %v", p)
		}
		for k := range p {
			switch k {
			case "code", "title", "detail", "type", "status":
			default:
				t.Fatalf("unexpected member %q in %v", k, p)
			}
		}
	})
}
