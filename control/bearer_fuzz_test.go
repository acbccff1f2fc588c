package control_test

import (
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/control"
)

// FuzzBearerToken checks the control API's bearer-token check on any
// Authorization value: it never panics, and it lets a request through
// only when the value is the scheme "Bearer" (in any case), one space,
// and exactly the token, with only spaces or tabs around it; the plain
// forms always pass.
func FuzzBearerToken(f *testing.F) {
	const token = "Zm9vYmFyYmF6cXV4LXRva2VuLTAxMjM0NTY3ODk"
	for _, s := range []string{"Bearer " + token, "bearer " + token, "BEARER  " + token + " \t", "Bearer " + token + "x", "Bearer " + token[1:], "Bearer\t" + token, "Basic " + token, "Bearer " + token + "\x00", "Bearer \u00a0" + token, token, "", "Bearer", "Bearer  "} {
		f.Add(s)
	}
	if !control.AuthorizedFor(token, "Bearer "+token) || !control.AuthorizedFor(token, "bearer "+token) {
		f.Fatal("the plain forms are refused")
	}
	if control.AuthorizedFor(token) {
		f.Fatal("a request without Authorization passes")
	}
	f.Fuzz(func(t *testing.T, h string) {
		ok := control.AuthorizedFor(token, h)
		want := len(h) > len("Bearer ") && strings.EqualFold(h[:6], "Bearer") && h[6] == ' ' && strings.Trim(h[7:], " \t") == token
		if ok != want {
			t.Fatalf("Authorization %q: authorized %v, want %v", h, ok, want)
		}
		// Only the first field counts; a second never adds access.
		if !ok && control.AuthorizedFor(token, h, "Bearer "+token) {
			t.Fatalf("Authorization %q then the token: authorized", h)
		}
	})
}
