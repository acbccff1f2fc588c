package login_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bulwarkhq/bulwark/login"
)

// referenceReaders model how common frameworks find the username field in
// a request, each its own way. Every value any of them finds is one an
// upstream handler could log in with.
var referenceReaders = []struct {
	name string
	read func(q, ct string, body []byte) []string
}{
	{"query-first (Flask, Servlet, Spring)", func(q, _ string, _ []byte) []string {
		vals, _ := url.ParseQuery(q) // like the frameworks, skips bad pairs
		return vals["username"]
	}},
	{"net/http FormValue (query, form, multipart)", func(q, ct string, body []byte) []string {
		r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/login", RawQuery: q}, Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		_ = r.FormValue("username") // parses form or multipart, ignoring errors
		return r.Form["username"]
	}},
	{"encoding/json Decoder ignoring Content-Type (gin ShouldBindJSON)", func(_, _ string, body []byte) []string {
		var v struct {
			Username *string `json:"username"`
		}
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&v); err != nil || v.Username == nil {
			return nil
		}
		return []string{*v.Username}
	}},
}

// FuzzReadUsername checks ReadUsername against the reference readers:
// when it answers a username, every value any reference finds is the same
// account (so the throttle counts what the handler will check); when it
// answers missing credentials, no reference finds a username (so a
// request let through uncounted carries none); the body is always put
// back byte for byte; nothing panics.
func FuzzReadUsername(f *testing.F) {
	for _, c := range credCases {
		if c.opt.Fields != nil || c.opt.BasicAuth {
			continue
		}
		u, _ := url.Parse(c.target)
		q := ""
		if u != nil {
			q = u.RawQuery
		}
		ct := c.ct
		if ct == "-" {
			ct = ""
		}
		ce := ""
		for i := 0; i+1 < len(c.header); i += 2 {
			if c.header[i] == "Content-Encoding" {
				ce = c.header[i+1]
			}
		}
		f.Add(c.method, q, ct, ce, []byte(c.body))
	}
	for _, s := range [][5]string{
		{"POST", "", ctJSON, "", `{"username":"a","Username":"a","USERNAME":"A","uSeRnAmE":" a "}`},
		{"POST", "", ctJSON, "", `{"a":{"b":{"c":[[[[[[[[[[{"username":"x"}]]]]]]]]]]}},"username":"y"}`},
		{"POST", "", ctJSON, "", `{"username":"\ud83d\ude00","x":"\u0000"}`},
		{"POST", "", ctJSON, "", `{"username":"\ud800"}`},
		{"POST", "", ctJSON, "", `{"x":123456789e123456789,"y":-0.0e-0,"username":"z"}`},
		{"POST", "username=q", "", "", `{"username":"q"}`},
		{"POST", "username=q&username=Q", ctForm, "", "username=%71"},
		{"PATCH", "a=1;username=x&b=2", "text/plain", "", `{"username":"x"}garbage{"username":"y"}`},
		{"POST", "", "multipart/form-data; boundary=\"--\"", "", "----\r\nContent-Disposition: form-data; name=username\r\n\r\nv\r\n------\r\n"},
		{"POST", "", "multipart/form-data; boundary=x", "", "preamble\r\n--x\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nv\r\n--x\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nv\r\n--x--\r\nepilogue"},
		{"POST", "", "multipart/form-data; boundary=x", "", "--x\nContent-Disposition: form-data; name=\"username\"\n\nlf-only\n--x--\n"},
		{"POST", "", "multipart/form-data; boundary=x; boundary=y", "", "--x\r\n\r\n--x--"},
		{"POST", "", "application/x-www-form-urlencoded , text/plain", "", "username=v"},
		{"POST", "", "APPLICATION/X-WWW-FORM-URLENCODED;charset", "", "username=v&username=w"},
		{"PUT", "%75sername=a", ctJSON, "gzip", "\x1f\x8b"},
		{"GET", "username=%ff", "", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], []byte(s[4]))
	}
	f.Fuzz(func(t *testing.T, method, query, ct, ce string, body []byte) {
		if len(body) > 8<<10 || len(query) > 4<<10 {
			return
		}
		r := &http.Request{Method: method, URL: &url.URL{Path: "/login", RawQuery: query}, Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		if ce != "" {
			r.Header.Set("Content-Encoding", ce)
		}
		user, err := login.ReadUsername(r, login.UsernameOptions{})

		switch {
		case errors.Is(err, login.ErrUnsupportedContentEncoding):
			return
		case err == nil, errors.Is(err, login.ErrMissingCredentials), errors.Is(err, login.ErrAmbiguousCredentials), errors.Is(err, login.ErrInvalidLoginRequest):
			got, rerr := io.ReadAll(r.Body)
			if rerr != nil || !bytes.Equal(got, body) || r.ContentLength != int64(len(body)) || r.TransferEncoding != nil {
				t.Fatalf("body not restored: %q %v (len %d)", got, rerr, r.ContentLength)
			}
			if rb, gerr := r.GetBody(); gerr != nil {
				t.Fatal(gerr)
			} else if again, _ := io.ReadAll(rb); !bytes.Equal(again, body) {
				t.Fatalf("GetBody: %q", again)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}

		switch {
		case err == nil:
			if strings.TrimSpace(user) == "" || !utf8.ValidString(user) {
				t.Fatalf("username %q", user)
			}
			for _, ref := range referenceReaders {
				for _, v := range ref.read(query, ct, body) {
					if login.NormalizeUsername(v) != login.NormalizeUsername(user) {
						t.Fatalf("%s reads %q, ReadUsername %q", ref.name, v, user)
					}
				}
			}
		case errors.Is(err, login.ErrMissingCredentials):
			for _, ref := range referenceReaders {
				for _, v := range ref.read(query, ct, body) {
					if strings.TrimSpace(v) != "" {
						t.Fatalf("%s reads %q where ReadUsername finds none", ref.name, v)
					}
				}
			}
		}
	})
}

// FuzzReadCredentialsPassword checks the password detection against the
// reference readers: when ReadCredentials says the request carries a
// password, at least one of them finds a non-empty password (a 2xx to a
// request without one must never clear the lockout); nothing panics.
func FuzzReadCredentialsPassword(f *testing.F) {
	for _, s := range [][4]string{
		{"username=a&password=x", "", ""},
		{"username=a&password=", "", ""},
		{"username=a;password=x", "", ""},
		{"username=a&PASS%57ORD=x", "", ""},
		{"", ctJSON, `{"username":"a","password":"x"}`},
		{"", ctJSON, `{"username":"a","password":""}`},
		{"", ctJSON, `{"username":"a","password":1}`},
		{"", ctJSON, `{"username":"a","Password":"\u0000"}`},
		{"", ctForm, "username=a&password=x"},
		{"", "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\na\r\n--x\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nx\r\n--x--\r\n"},
		{"", "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\na\r\n--x\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\n\r\n--x--\r\n"},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	f.Fuzz(func(t *testing.T, query, ct string, body []byte) {
		if len(body) > 8<<10 || len(query) > 4<<10 {
			return
		}
		r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/login", RawQuery: query}, Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		c, err := login.ReadCredentials(r, login.UsernameOptions{})
		if err != nil || !c.Password {
			return
		}
		for _, find := range passwordReaders {
			if find(query, ct, body) {
				return
			}
		}
		t.Fatalf("ReadCredentials found a password no reference reader finds: query %q, %q, body %q", query, ct, body)
	})
}

// passwordReaders model how frameworks find a non-empty password field,
// field names compared case-insensitively (as ReadCredentials does, to
// err towards "no password").
var passwordReaders = []func(q, ct string, body []byte) bool{
	func(q, _ string, _ []byte) bool { return nonEmptyField(q) },
	func(q, _ string, _ []byte) bool { return nonEmptyField(strings.ReplaceAll(q, ";", "&")) },
	func(_, _ string, body []byte) bool { return nonEmptyField(string(body)) },
	func(_, _ string, body []byte) bool {
		return nonEmptyField(strings.ReplaceAll(string(body), ";", "&"))
	},
	func(q, ct string, body []byte) bool {
		r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/login", RawQuery: q}, Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			_ = r.ParseForm()
		}
		for k, vs := range r.Form {
			if strings.EqualFold(k, "password") {
				for _, v := range vs {
					if v != "" {
						return true
					}
				}
			}
		}
		return false
	},
	func(_, _ string, body []byte) bool {
		b := bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
		var m map[string]json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&m); err != nil {
			return false
		}
		for k, v := range m {
			var s string
			if strings.EqualFold(k, "password") && json.Unmarshal(v, &s) == nil && s != "" {
				return true
			}
		}
		return false
	},
}

// nonEmptyField reports whether a URL-encoded string holds a non-empty
// value for a key that decodes to "password" (any case).
func nonEmptyField(s string) bool {
	for pair := range strings.SplitSeq(s, "&") {
		k, v, _ := strings.Cut(pair, "=")
		if dk, err := url.QueryUnescape(k); err == nil && strings.EqualFold(dk, "password") && v != "" {
			return true
		}
	}
	return false
}
