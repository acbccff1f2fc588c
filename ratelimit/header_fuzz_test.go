package ratelimit

import (
	"errors"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/internal/fieldname"
)

// FuzzHeader checks the Header key against what a lenient application
// server may read: fields whose names differ only in case, and (for a
// name with '-') in '_' for '-' as CGI-style servers fold them, are one
// field. The key is that field's value when it is sent once (the
// fallback when it is missing or empty), and ErrAmbiguousKey when any
// such field is sent more than once in all: the limiter never counts one
// line while the application reads another. The request's fields are
// "name: value" lines, with names canonicalised as net/http and the
// fast engines do.
func FuzzHeader(f *testing.F) {
	for _, c := range [][2]string{
		{"X-Api-Key", "X-Api-Key: a"},
		{"X-Api-Key", "X-Api-Key: a\nX_Api_Key: b"},
		{"X-Api-Key", "x_api_key: b"},
		{"Authorization", "Authorization: Bearer a\nauthorization: Bearer b"},
		{"Authorization", "Authorization: "},
		{"apikey", "Apikey: k\nApi_Key: other"},
		{"X-Api-Key", "X-Api_Key: a\nX_Api-Key: b"},
		{"X-Api-Key", "X-Api-Keys: a\nAccept: */*"},
	} {
		f.Add(c[0], c[1])
	}
	fallback := func(*http.Request) (Key, error) { return StringKey("\x00fallback"), nil }
	f.Fuzz(func(t *testing.T, name, fields string) {
		if !fieldname.Token(name) || strings.Contains(name, "_") {
			return // names come from configuration, where they are '-' tokens
		}
		r := &http.Request{Header: http.Header{}}
		norm := func(k string) string { return strings.ToUpper(strings.ReplaceAll(k, "-", "_")) }
		want := norm(name)
		dashed := strings.Contains(name, "-")
		var lines []string // the values an application may read as the field
		for _, line := range strings.Split(fields, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || !fieldname.Token(k) {
				continue
			}
			k = textproto.CanonicalMIMEHeaderKey(k)
			v = strings.TrimSpace(v)
			r.Header[k] = append(r.Header[k], v)
			same := strings.EqualFold(k, name)
			if dashed && strings.Contains(k, "_") {
				same = norm(k) == want
			}
			if same {
				lines = append(lines, v)
			}
		}
		k, err := Header(name, fallback)(r)
		switch {
		case len(lines) > 1:
			if !errors.Is(err, ErrAmbiguousKey) {
				t.Fatalf("%q in %q: %d lines, key %v err %v; want ErrAmbiguousKey", name, fields, len(lines), k, err)
			}
		case err != nil:
			t.Fatalf("%q in %q: %v", name, fields, err)
		case len(lines) == 0 || lines[0] == "":
			if k != StringKey("\x00fallback") {
				t.Fatalf("%q in %q: key %v, want the fallback", name, fields, k)
			}
		case k != StringKey(lines[0]):
			t.Fatalf("%q in %q: key %v, want %q", name, fields, k, lines[0])
		}
	})
}
