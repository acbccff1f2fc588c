package wire

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// Write repeats the response's request ID in the problem document, on
// both encodings (with and without Extra members), and leaves an
// invalid or repeated one out.
func TestWriteRequestID(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, extra := range []map[string]any{nil, {"errorCode": "x"}} {
		rec := httptest.NewRecorder()
		rec.Header().Set(RequestIDField, id)
		Write(rec, Problem{Status: 429, Code: CodeRateLimited, Extra: extra})
		if got := decode(t, rec)["request_id"]; got != id {
			t.Errorf("extra %v: request_id = %v, want %s", extra, got, id)
		}
	}
	for _, hv := range [][]string{nil, {"bad id"}, {id, id}, {strings.Repeat("a", MaxRequestIDLen+1)}} {
		rec := httptest.NewRecorder()
		if hv != nil {
			rec.Header()[RequestIDField] = hv
		}
		Write(rec, New(CodeNotFound))
		if got, ok := decode(t, rec)["request_id"]; ok {
			t.Errorf("header %q: request_id = %v, want none", hv, got)
		}
	}
}

func TestValidRequestID(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"f47ac10b-58cc-4372-a567-0e02b2c3d479", true},
		{"req:AbC+/=_.-9", true},
		{strings.Repeat("a", MaxRequestIDLen), true},
		{strings.Repeat("a", MaxRequestIDLen+1), false},
		{"", false},
		{"a b", false},
		{"a\"b", false},
		{"a\\b", false},
		{"a\x00b", false},
		{"a\r\nb", false},
		{"é", false},
		{"a,b", false},
		{"<script>", false},
	} {
		if ValidRequestID(c.id) != c.ok || ValidRequestID([]byte(c.id)) != c.ok {
			t.Errorf("ValidRequestID(%q) = %v, want %v", c.id, !c.ok, c.ok)
		}
	}
}

func TestAppendRequestID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := string(AppendRequestID(nil))
		if len(id) != RequestIDLen || !ValidRequestID(id) || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("generated %q", id)
		}
		if seen[id] {
			t.Fatalf("%q generated twice", id)
		}
		seen[id] = true
	}
}

// AppendRequestID into a buffer with room does not allocate.
func TestNoRaceAppendRequestIDAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not meaningful under -race")
	}
	buf := make([]byte, 0, RequestIDLen)
	if n := testing.AllocsPerRun(100, func() { buf = AppendRequestID(buf[:0]) }); n != 0 {
		t.Errorf("AppendRequestID into a buffer with room: %v allocations, want 0", n)
	}
}

// FuzzValidRequestID: what ValidRequestID accepts is bounded and needs
// no escaping in a header field, a log line or a JSON string.
func FuzzValidRequestID(f *testing.F) {
	f.Add("4bf92f3577b34da6a3ce929d0e0e4736")
	f.Add("a b")
	f.Add("\"")
	f.Fuzz(func(t *testing.T, id string) {
		if !ValidRequestID(id) {
			return
		}
		if len(id) > MaxRequestIDLen || strings.ContainsAny(id, " \"\\\r\n\t,;<>") {
			t.Fatalf("accepted %q", id)
		}
	})
}
