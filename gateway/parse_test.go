package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/wire"
)

func TestIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
		code   string
	}{
		{nil, "", wire.CodeIdempotencyKeyRequired},
		{[]string{""}, "", wire.CodeIdempotencyKeyRequired},
		{[]string{"abc-123"}, "abc-123", ""},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{[]string{"a b"}, "", wire.CodeIdempotencyKeyInvalid},
		{[]string{`""`}, "", wire.CodeIdempotencyKeyInvalid},
		{[]string{strings.Repeat("k", 129)}, "", wire.CodeIdempotencyKeyInvalid},
		{[]string{"a", "b"}, "", wire.CodeIdempotencyKeyInvalid},
	} {
		h := http.Header{"Idempotency-Key": tc.values}
		got, code := idempotencyKey(h)
		if got != tc.want || code != tc.code {
			t.Errorf("%q: got %q %q, want %q %q", tc.values, got, code, tc.want, tc.code)
		}
	}
}

func TestProblemString(t *testing.T) {
	for _, tc := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "b.yaml", Line: 3, Path: "a.b", Msg: "bad"}, "b.yaml:3: a.b: bad"},
		{Problem{File: "b.yaml", Msg: "cannot read: x"}, "b.yaml: cannot read: x"},
		{Problem{Path: "BULWARK_PROFILE", Msg: "bad"}, "environment: BULWARK_PROFILE: bad"},
		// A Config built in Go has no file.
		{Problem{Path: "routes[0].name", Msg: "bad"}, "routes[0].name: bad"},
		{Problem{Msg: "bad"}, "bad"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("got %q want %q", got, tc.want)
		}
	}
}
