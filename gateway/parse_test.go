package gateway

import (
	"net/http"
	"strings"
	"testing"
)

func TestExtractUsername(t *testing.T) {
	for _, tc := range []struct {
		ctype, body, want string
		ok                bool
	}{
		{"application/json", `{"username":"alice"}`, "alice", true},
		{"application/json; charset=utf-8", `{"a":[1,2,{"username":"x"}],"username":"bob"}`, "bob", true},
		{"application/vnd.api+json", `{"username":"carol"}`, "carol", true},
		{"application/json", `{"Username":"dave"}`, "dave", true}, // case-insensitive, as Go decoders match
		{"application/json", `{"username":"a","USERNAME":"b"}`, "", false},
		{"application/json", `{"username":"a","username":"b"}`, "", false},
		{"application/json", `{"username":""}`, "", false},
		{"application/json", `{"username":null}`, "", false},
		{"application/json", `{"username":"a"} {"x":1}`, "", false},
		{"application/json", `["username","a"]`, "", false},
		{"application/json", `{"username":"a"`, "", false},
		{"application/x-www-form-urlencoded", "username=erin&password=x", "erin", true},
		{"application/x-www-form-urlencoded", "username=a&username=b", "", false},
		{"application/x-www-form-urlencoded", "password=x", "", false},
		{"text/plain", "username=erin", "", false},
		{"", `{"username":"a"}`, "", false},
	} {
		h := http.Header{}
		h.Set("Content-Type", tc.ctype)
		got, ok := extractUsername(h, []byte(tc.body), "username")
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s %s: got %q %v, want %q %v", tc.ctype, tc.body, got, ok, tc.want, tc.ok)
		}
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Encoding", "gzip")
	if _, ok := extractUsername(h, []byte(`{"username":"a"}`), "username"); ok {
		t.Error("a compressed body was parsed")
	}
}

func FuzzExtractUsername(f *testing.F) {
	f.Add("application/json", `{"username":"alice","password":"x"}`)
	f.Add("application/x-www-form-urlencoded", "username=bob")
	f.Add("application/json", `{"username":"a","Username":"b"}`)
	f.Fuzz(func(t *testing.T, ctype, body string) {
		h := http.Header{}
		h.Set("Content-Type", ctype)
		u, ok := extractUsername(h, []byte(body), "username")
		if ok && u == "" {
			t.Fatal("ok with an empty username")
		}
		if !ok && u != "" {
			t.Fatal("a username without ok")
		}
	})
}

func TestIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
		code   string
	}{
		{nil, "", CodeIdempotencyKeyRequired},
		{[]string{""}, "", CodeIdempotencyKeyRequired},
		{[]string{"abc-123"}, "abc-123", ""},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{[]string{"a b"}, "", CodeIdempotencyKeyInvalid},
		{[]string{`""`}, "", CodeIdempotencyKeyInvalid},
		{[]string{strings.Repeat("k", 129)}, "", CodeIdempotencyKeyInvalid},
		{[]string{"a", "b"}, "", CodeIdempotencyKeyInvalid},
	} {
		h := http.Header{"Idempotency-Key": tc.values}
		got, code := idempotencyKey(h)
		if got != tc.want || code != tc.code {
			t.Errorf("%q: got %q %q, want %q %q", tc.values, got, code, tc.want, tc.code)
		}
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind keyKind
		hdr  string
		err  bool
	}{
		{"client_ip", keyClientIP, "", false},
		{"route", keyRoute, "", false},
		{"header:x-api-key", keyHeader, "X-Api-Key", false},
		{"header:", 0, "", true},
		{"header:bad header", 0, "", true},
		{"ip", 0, "", true},
	} {
		k, err := parseKey(tc.in)
		if (err != nil) != tc.err || k.kind != tc.kind || k.header != tc.hdr {
			t.Errorf("%q: %+v %v", tc.in, k, err)
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
