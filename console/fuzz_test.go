package console

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzChange sends arbitrary state-changing requests (method, endpoint,
// content type, origin proof, body) with a valid session. Properties: no
// panic and no 500; an answer is JSON or a problem, never echoing the
// token; a request without proof of the console's origin changes
// nothing.
func FuzzChange(f *testing.F) {
	f.Add(uint8(0), uint8(0), "application/json", "http://127.0.0.1:9091", "same-origin", `{"ip": "203.0.113.0/24", "ttl_ms": 1000, "reason": "x"}`)
	f.Add(uint8(1), uint8(0), "application/json", "", "same-origin", `{"ip": "203.0.113.0/24"}`)
	f.Add(uint8(0), uint8(1), "application/json; charset=utf-8", "http://127.0.0.1:9091", "", `{"ip": "2001:db8::/32", "ttl_ms": 0}`)
	f.Add(uint8(0), uint8(2), "application/json", "http://127.0.0.1:9091", "same-origin", `{}`)
	f.Add(uint8(0), uint8(3), "application/x-www-form-urlencoded", "http://127.0.0.1:9091", "same-origin", `token=`+token)
	f.Add(uint8(0), uint8(3), "application/json", "http://evil.example", "cross-site", `{"token": "`+token+`"}`)
	f.Add(uint8(1), uint8(1), "text/plain", "null", "same-site", `{"ip": 1e999}`)
	f.Add(uint8(2), uint8(4), "application/json", "http://127.0.0.1:9091", "same-origin", `{"ip": "0.0.0.0/0", "ttl_ms": -5}`)
	methods := []string{"POST", "DELETE", "PUT", "GET"}
	paths := []string{"/ui/api/lists/deny", "/ui/api/lists/allow", "/ui/api/reload", "/ui/api/login", "/ui/api/logout"}
	fx := newFixture(f, nil)
	f.Fuzz(func(t *testing.T, m, p uint8, ct, origin, site, body string) {
		fx.t = t
		id, _, _, err := fx.c.sessions.create(fx.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		ck := &http.Cookie{Name: CookieName, Value: id}
		hdr := []string{"Cookie", ck.String(), "Content-Type", ct, "RemoteAddr", "192.0.2.98:1"}
		if origin != "" {
			hdr = append(hdr, "Origin", origin)
		}
		if site != "" {
			hdr = append(hdr, "Sec-Fetch-Site", site)
		}
		before := [2]int{fx.allow.Len(), fx.deny.Len()}
		w := fx.do(methods[int(m)%len(methods)], paths[int(p)%len(paths)], body, hdr...)
		if w.Code == 500 {
			t.Fatalf("500: %s", w.Body)
		}
		if ct := w.Header().Get("Content-Type"); w.Body.Len() > 0 && ct != "application/json" && ct != "application/problem+json" {
			t.Errorf("answer type %q", ct)
		}
		if strings.Contains(w.Body.String(), token) {
			t.Error("the token was echoed")
		}
		proof := (site == "same-origin" || site == "") && (origin == "" || strings.EqualFold(origin, "http://127.0.0.1:9091")) && site+origin != ""
		if !proof && [2]int{fx.allow.Len(), fx.deny.Len()} != before {
			t.Errorf("a request without proof of origin changed a list (origin %q site %q)", origin, site)
		}
		fx.allow.Clear()
		fx.deny.Clear()
	})
}
