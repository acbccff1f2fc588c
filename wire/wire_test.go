package wire

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func decode(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", rec.Body.String(), err)
	}
	return m
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, Problem{Status: 429, Code: CodeRateLimited, RetryAfter: 7})
	if rec.Code != 429 {
		t.Fatalf("status %d", rec.Code)
	}
	h := rec.Header()
	for k, want := range map[string]string{
		"Content-Type":           ContentType,
		"Cache-Control":          "no-store",
		"X-Content-Type-Options": "nosniff",
		"Retry-After":            "7",
		"Content-Length":         itoa(rec.Body.Len()),
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if h.Get("Connection") != "" {
		t.Errorf("Write must not set Connection")
	}
	m := decode(t, rec)
	want := map[string]any{"type": "about:blank", "status": 429.0, "code": CodeRateLimited, "title": "Too Many Requests",
		"detail": "Too many requests; retry later.", "retryAfter": 7.0}
	if len(m) != len(want) {
		t.Fatalf("members %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
}

func TestWriteNoRetryAfter(t *testing.T) {
	for _, ra := range []int64{0, -3} {
		rec := httptest.NewRecorder()
		Write(rec, Problem{Status: 503, Code: CodeNotReady, Title: "Not ready", RetryAfter: ra})
		if rec.Header().Get("Retry-After") != "" {
			t.Errorf("RetryAfter %d: header set", ra)
		}
		if _, ok := decode(t, rec)["retryAfter"]; ok {
			t.Errorf("RetryAfter %d: member present", ra)
		}
	}
}

func TestWriteClose(t *testing.T) {
	for _, c := range []struct {
		major int
		want  string
	}{{1, "close"}, {2, ""}, {3, ""}} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.ProtoMajor = c.major
		WriteClose(rec, r, New(CodeNotReady))
		if rec.Header().Get("Connection") != c.want || rec.Code != 503 {
			t.Errorf("HTTP/%d: Connection %q status %d, want %q 503", c.major, rec.Header().Get("Connection"), rec.Code, c.want)
		}
	}
}

// Reject closes an HTTP/1.x connection only when an announced body is
// left unread, and never closes HTTP/2.
func TestReject(t *testing.T) {
	for _, c := range []struct {
		major int
		body  string
		want  string
	}{{1, "", ""}, {1, "x=1", "close"}, {2, "x=1", ""}, {2, "", ""}} {
		rec := httptest.NewRecorder()
		var r *http.Request
		if c.body != "" {
			r = httptest.NewRequest("POST", "/", strings.NewReader(c.body))
		} else {
			r = httptest.NewRequest("GET", "/", nil)
		}
		r.ProtoMajor = c.major
		Reject(rec, r, New(CodeRateLimited))
		if got := rec.Header().Get("Connection"); got != c.want || rec.Code != 429 {
			t.Errorf("HTTP/%d body %q: Connection %q status %d, want %q 429", c.major, c.body, got, rec.Code, c.want)
		}
	}
}

// Every registered code has a status in [400, 599], a detail sentence,
// and New renders it with the status phrase as title.
func TestRegistry(t *testing.T) {
	codes := Codes()
	if len(codes) < 40 {
		t.Fatalf("only %d codes registered", len(codes))
	}
	for _, c := range codes {
		st, detail, ok := Lookup(c)
		if !ok || st < 400 || st > 599 || detail == "" {
			t.Errorf("%q: status %d detail %q ok %v", c, st, detail, ok)
		}
		if c == "" || strings.ContainsAny(c, " \t\"") {
			t.Errorf("code %q is not a token", c)
		}
		p := New(c)
		if p.Code != c || p.Status != st || p.Title != http.StatusText(st) || p.Detail != detail {
			t.Errorf("New(%q) = %+v", c, p)
		}
	}
	if p := New("no_such_code"); p.Code != CodeInternal || p.Status != 500 {
		t.Errorf("unknown code gave %+v, want the internal problem", p)
	}
}

func TestWriteInvalidStatusNeverPanics(t *testing.T) {
	for _, st := range []int{0, -1, 99, 200, 302, 600, 1000} {
		rec := httptest.NewRecorder()
		Write(rec, Problem{Status: st, Code: CodeInternal, Title: "x"})
		if rec.Code != 500 {
			t.Errorf("status %d sent as %d, want 500", st, rec.Code)
		}
		if got := decode(t, rec)["status"]; got != 500.0 {
			t.Errorf("status %d: body status %v", st, got)
		}
	}
}

func TestWriteExtra(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, Problem{Status: 429, Code: CodeLoginRateLimitExceeded, Title: "t", RetryAfter: 2,
		Extra: map[string]any{"errorCode": "rate-limit-exceeded", "code": "hijack", "status": 200}})
	m := decode(t, rec)
	if m["errorCode"] != "rate-limit-exceeded" {
		t.Errorf("extra member lost: %v", m)
	}
	if m["code"] != CodeLoginRateLimitExceeded || m["status"] != 429.0 {
		t.Errorf("extra overrode fixed members: %v", m)
	}
}

func TestWriteUnencodableExtra(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, Problem{Status: 429, Code: "x", Title: "t", RetryAfter: 3, Extra: map[string]any{"bad": math.Inf(1)}})
	if rec.Code != 500 || rec.Body.String() != internalBody {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
	if rec.Header().Get("Retry-After") != "" {
		t.Errorf("Retry-After kept on the fallback answer")
	}
}

// The fast path (no Extra) and the map path must produce identical bytes.
func TestEncodePathsAgree(t *testing.T) {
	ps := []Problem{
		{Status: 503, Code: CodeNotReady, Title: "Not ready", Type: "about:blank"},
		{Status: 429, Code: CodeRateLimited, Title: "<&>", Detail: "d", RetryAfter: 9, Type: "about:blank"},
	}
	for _, p := range ps {
		for _, id := range []string{"", "0123456789abcdef0123456789abcdef"} {
			fast, ok1 := p.encode(id)
			p2 := p
			p2.Extra = map[string]any{"zz": nil}
			slow, ok2 := p2.encode(id)
			var m map[string]any
			_ = json.Unmarshal(slow, &m)
			delete(m, "zz")
			b, _ := json.Marshal(m)
			if !ok1 || !ok2 || string(fast) != string(b)+"\n" {
				t.Errorf("fast %q != map %q", fast, b)
			}
		}
	}
}

func TestSetRetryAfter(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{0, "1"}, {-time.Second, "1"}, {time.Nanosecond, "1"}, {time.Second, "1"}, {1001 * time.Millisecond, "2"}, {90 * time.Second, "90"}} {
		h := http.Header{}
		got := SetRetryAfter(h, c.d)
		if h.Get("Retry-After") != c.want || itoa(int(got)) != c.want {
			t.Errorf("%v: header %q returned %d, want %s", c.d, h.Get("Retry-After"), got, c.want)
		}
	}
}

func TestSetRateLimit(t *testing.T) {
	h := http.Header{}
	SetRateLimit(h, RateLimit{Policy: "peer", Limit: 300, Remaining: 12, Window: time.Minute, Reset: 1500 * time.Millisecond})
	if got := h.Get("RateLimit-Policy"); got != `"peer";q=300;w=60` {
		t.Errorf("policy %q", got)
	}
	if got := h.Get("RateLimit"); got != `"peer";r=12;t=2` {
		t.Errorf("ratelimit %q", got)
	}
	h = http.Header{}
	SetRateLimit(h, RateLimit{Policy: "g", Limit: 5, Remaining: -4, Window: time.Millisecond})
	if got := h.Get("RateLimit-Policy"); got != `"g";q=5;w=1` {
		t.Errorf("policy %q", got)
	}
	if got := h.Get("RateLimit"); got != `"g";r=0;t=0` {
		t.Errorf("ratelimit %q", got)
	}
	h = http.Header{}
	SetRateLimit(h, RateLimit{Policy: "a\"b\\c\x01", Limit: 1, Window: time.Second})
	if got := h.Get("RateLimit-Policy"); got != `"a\"b\\c_";q=1;w=1` {
		t.Errorf("policy with specials %q", got)
	}
	// An undisclosed policy (Limit 0, the shield's): the standing only.
	h = http.Header{}
	SetRateLimit(h, RateLimit{Policy: "shield", Reset: 7 * time.Second})
	if got, pol := h.Get("RateLimit"), h.Values("RateLimit-Policy"); got != `"shield";r=0;t=7` || pol != nil {
		t.Errorf("undisclosed policy: RateLimit %q, RateLimit-Policy %q", got, pol)
	}
}

func TestCodesAreStable(t *testing.T) {
	// The seed-fixed codes are part of the public contract: a change here
	// breaks clients.
	fixed := map[string]string{
		CodeAuthenticationRateLimited:       "authentication_rate_limited",
		CodeAuthenticationShieldUnavailable: "authentication_shield_unavailable",
		CodeQuotaExceeded:                   "quota_exceeded",
		CodeLoginRateLimitExceeded:          "rate-limit-exceeded",
		CodeNotReady:                        "not_ready",
	}
	for got, want := range fixed {
		if got != want {
			t.Errorf("code %q changed, want %q", got, want)
		}
	}
	for _, c := range []string{CodeDraining, CodeOverloaded, CodeTimeout, CodeRequestTimeout, CodeURLTooLong,
		CodeTooManyHeaders, CodePayloadTooLarge, CodeUnsupportedMediaType, CodeUnsupportedContentEncoding,
		CodeInvalidContentLength, CodeInvalidJSON, CodeInvalidRequest, CodeNotFound, CodeMethodNotAllowed,
		CodeResponseTooLarge, CodeInternal} {
		if c == "" || strings.ToLower(c) != c || strings.ContainsAny(c, " \t") {
			t.Errorf("code %q is not a lower-case token", c)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func BenchmarkWrite(b *testing.B) {
	p := Problem{Status: 429, Code: CodeRateLimited, RetryAfter: 3}
	rec := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		rec.Body.Reset()
		Write(rec, p)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Over a real HTTP/1.1 connection, WriteClose answers without reading an
// announced body and the server closes the socket at once, whether the
// announced body is above or below net/http's 256 KiB post-handler drain.
func TestWriteCloseClosesWithUnreadBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteClose(w, r, New(CodeNotReady))
	}))
	defer srv.Close()
	for _, cl := range []int{100, 10 << 20} {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a safety deadline only
		fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", cl)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !resp.Close {
			t.Fatalf("cl %d: %d close=%v", cl, resp.StatusCode, resp.Close)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("cl %d: next read %v, want EOF", cl, err)
		}
		c.Close()
	}
}
