package login

import (
	"encoding/json"
	"strings"
	"testing"
)

// referenceEnd is what the credential reader decided before validEnd:
// the value valueEnd finds at b[i], if json.Valid accepts it.
func referenceEnd(b []byte, i int) int {
	end := valueEnd(b, i)
	if end < 0 || !json.Valid(b[i:end]) {
		return -1
	}
	return end
}

// validJSONCases are bodies at the edges of the JSON grammar, beginning
// with an object or an array as the reader's do.
func validJSONCases() []string {
	cases := []string{
		`{}`, `[]`, `{ }`, `[ ]`, `{"a":1}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{"a"}`, `{1:2}`,
		`[1,]`, `[,1]`, `[1 2]`, `{"a":[1,{"b":null}],"c":true}`, `{"a":1}x`, `{"a":1} {"b":2}`, `{"a":1`,
		`["\u00e9", "\uD83D\uDE00", "\/\b\f\n\r\t\\\""]`, `["\u00g0"]`, `["\u00e"]`, `["\x"]`, `["` + "\x01" + `"]`,
		`["` + "\x7f\xff\xfe" + `"]`, `["` + "\t" + `"]`, "[\"\\", `["\`, `["abc`,
		`[0]`, `[-0]`, `[01]`, `[-]`, `[1.]`, `[.5]`, `[1.5e]`, `[1.5e+]`, `[1.5e+3]`, `[1E-03]`, `[-12.340e10]`, `[+1]`, `[1e5.0]`,
		`[true]`, `[truex]`, `[tru]`, `[false,null]`, `[nul]`, `[True]`, `[NaN]`, `[Infinity]`,
		"{\t\"a\"\r\n:\n1 }", "[1\x00]", `{"a":{"b":{"c":[[[]]]}}}`, `{"a":{"b":{"c":[[[]]]}}`, `[{]}`, `{[}]`, `{"a":1]`, `["a":1]`,
		"", "{", "[", `"str"`, `1`,
	}
	for _, n := range []int{63, 64, 65, 128, maxJSONDepth, maxJSONDepth + 1} {
		cases = append(cases, strings.Repeat("[", n)+strings.Repeat("]", n))
		cases = append(cases, strings.Repeat(`{"a":`, n-1)+"{}"+strings.Repeat("}", n-1))
		cases = append(cases, strings.Repeat("[", n)+strings.Repeat("]", n-1)) // one left open
	}
	return cases
}

// validEnd decides as json.Valid over valueEnd's value, the two passes
// it replaces, and finds the same end, at the depth bound too.
func TestValidEnd(t *testing.T) {
	for _, c := range validJSONCases() {
		b := []byte(c)
		want := -1 // validEnd reads objects and arrays only
		if len(b) > 0 && (b[0] == '{' || b[0] == '[') {
			want = referenceEnd(b, 0)
		}
		if got := validEnd(b, 0); got != want {
			name := c
			if len(name) > 40 {
				name = name[:40] + "…"
			}
			t.Errorf("validEnd(%q) = %d, want %d", name, got, want)
		}
	}
}

func FuzzValidEnd(f *testing.F) {
	for _, c := range validJSONCases() {
		if len(c) < 200 {
			f.Add([]byte(c))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '{' && b[0] != '[' {
			b = append([]byte{'['}, b...)
		}
		if got, want := validEnd(b, 0), referenceEnd(b, 0); got != want {
			t.Fatalf("validEnd(%q) = %d, want %d", b, got, want)
		}
	})
}

// BenchmarkJSONLogin reads the username of the harness's login body.
func BenchmarkJSONLogin(b *testing.B) {
	m := Message{Fields: HeaderFields(map[string][]string{"Content-Type": {"application/json"}}), ContentLength: -1}
	body := `{"username":"alice","password":"hunter2"}`
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		m.Body = strings.NewReader(body)
		if _, _, err := ReadMessage(m, UsernameOptions{}, buf); err != nil {
			b.Fatal(err)
		}
	}
}
