package login_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/wire"
)

type credCase struct {
	name    string
	method  string // default POST
	target  string // default /login
	ct      string // Content-Type; "-" means none
	body    string
	header  []string // extra header pairs
	opt     login.UsernameOptions
	want    string // expected username when err is nil
	wantErr error
}

func (c credCase) request() *http.Request {
	method, target := c.method, c.target
	if method == "" {
		method = http.MethodPost
	}
	if target == "" {
		target = "/login"
	}
	r := httptest.NewRequest(method, target, strings.NewReader(c.body))
	if c.body == "" {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	switch c.ct {
	case "-", "":
	default:
		r.Header.Set("Content-Type", c.ct)
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		r.Header.Add(c.header[i], c.header[i+1])
	}
	return r
}

const (
	ctJSON = "application/json"
	ctForm = "application/x-www-form-urlencoded"
)

// mp builds a multipart/form-data body with boundary "b0undary" from
// raw part sections (header lines, blank line, value).
func mp(parts ...string) string {
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString("--b0undary\r\n" + p + "\r\n")
	}
	sb.WriteString("--b0undary--\r\n")
	return sb.String()
}

const ctMP = "multipart/form-data; boundary=b0undary"

func field(name, value string) string {
	return "Content-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + value
}

var credCases = []credCase{
	// JSON.
	{name: "json", ct: ctJSON, body: `{"username":"alice","password":"x"}`, want: "alice"},
	{name: "json charset", ct: "Application/JSON; charset=utf-8", body: `{"username":"alice"}`, want: "alice"},
	{name: "json+suffix", ct: "application/vnd.api+json", body: `{"username":"alice"}`, want: "alice"},
	{name: "json key case", ct: ctJSON, body: `{"UserName":"alice"}`, want: "alice"},
	{name: "json dup keys differ", ct: ctJSON, body: `{"username":"alice","username":"bob"}`, wantErr: login.ErrAmbiguousCredentials},
	{name: "json case variant differs", ct: ctJSON, body: `{"USERNAME":"victim","username":"decoy"}`, wantErr: login.ErrAmbiguousCredentials},
	{name: "json case variant same account", ct: ctJSON, body: `{"username":"alice","UserName":" ALICE "}`, want: "alice"},
	{name: "json unicode escape key", ct: ctJSON, body: `{"\u0075sername":"alice"}`, want: "alice"},
	{name: "json escaped key differs", ct: ctJSON, body: `{"\u0055SERNAME":"victim","username":"decoy"}`, wantErr: login.ErrAmbiguousCredentials},
	{name: "json long s folds", ct: ctJSON, body: `{"uſername":"victim","username":"decoy"}`, wantErr: login.ErrAmbiguousCredentials},
	{name: "json unicode escape value", ct: ctJSON, body: `{"username":"\u0061lice\/x"}`, want: "alice/x"},
	{name: "json nested ignored", ct: ctJSON, body: `{"user":{"username":"bob"},"list":[{"username":"eve"}]}`, wantErr: login.ErrMissingCredentials},
	{name: "json object value", ct: ctJSON, body: `{"username":{"x":1}}`, wantErr: login.ErrInvalidLoginRequest},
	{name: "json number value", ct: ctJSON, body: `{"username":123}`, wantErr: login.ErrInvalidLoginRequest},
	{name: "json null value", ct: ctJSON, body: `{"username":null}`, wantErr: login.ErrInvalidLoginRequest},
	{name: "json huge number elsewhere", ct: ctJSON, body: `{"n":1e999999999,"m":-123456789012345678901234567890,"username":"alice"}`, want: "alice"},
	{name: "json strings with braces", ct: ctJSON, body: `{"p":"}\"{[","username":"alice","q":["]",{"a":"}"}]}`, want: "alice"},
	{name: "json trailing data declared", ct: ctJSON, body: `{"username":"alice"} {"username":"bob"}`, wantErr: login.ErrInvalidLoginRequest},
	{name: "json array declared", ct: ctJSON, body: `[{"username":"alice"}]`, wantErr: login.ErrInvalidLoginRequest},
	{name: "json malformed declared", ct: ctJSON, body: `{"username":"alice"`, wantErr: login.ErrInvalidLoginRequest},
	{name: "json blank declared", ct: ctJSON, body: "   ", wantErr: login.ErrInvalidLoginRequest},
	{name: "json bom", ct: ctJSON, body: "\xef\xbb\xbf{\"username\":\"alice\"}", want: "alice"},
	{name: "json whitespace around", ct: ctJSON, body: " \n{ \"username\" : \"alice\" }\r\n", want: "alice"},
	{name: "json blank username", ct: ctJSON, body: `{"username":"  "}`, wantErr: login.ErrMissingCredentials},
	{name: "json empty object", ct: ctJSON, body: `{}`, wantErr: login.ErrMissingCredentials},
	// JSON without a JSON Content-Type: some decoders ignore it.
	{name: "undeclared json", ct: "-", body: `{"username":"alice"}`, want: "alice"},
	{name: "text/plain json", ct: "text/plain", body: `{"username":"alice"}`, want: "alice"},
	{name: "form-declared json", ct: ctForm, body: `{"username":"victim"}`, want: "victim"},
	{name: "undeclared json trailing", ct: "text/plain", body: `{"username":"alice"} trailing`, want: "alice"},
	{name: "undeclared invalid json ignored", ct: "text/plain", body: `{"username":"alice"`, wantErr: login.ErrMissingCredentials},
	{name: "form and json disagree", ct: ctForm, body: `{"username":"victim"}&username=decoy`, wantErr: login.ErrAmbiguousCredentials},
	// Form.
	{name: "form", ct: ctForm, body: "username=alice&password=x", want: "alice"},
	{name: "form no content type", ct: "-", body: "username=alice&password=x", want: "alice"},
	{name: "form charset", ct: ctForm + "; charset=UTF-8", body: "username=alice", want: "alice"},
	{name: "form dup differ", ct: ctForm, body: "username=alice&username=bob", wantErr: login.ErrAmbiguousCredentials},
	{name: "form dup same", ct: ctForm, body: "username=alice&username=Alice", want: "alice"},
	{name: "form key escaped", ct: ctForm, body: "user%6Eame=alice", want: "alice"},
	{name: "form key case", ct: ctForm, body: "USERNAME=alice", want: "alice"},
	{name: "form plus", ct: ctForm, body: "username=al+ice%40example.com", want: "al ice@example.com"},
	{name: "form bad escape", ct: ctForm, body: "username=ali%zzce", wantErr: login.ErrInvalidLoginRequest},
	{name: "form bad escape elsewhere", ct: ctForm, body: "x=%zz&username=alice", want: "alice"},
	{name: "form semicolon", ct: ctForm, body: "x=1;username=bob", want: "bob"},
	{name: "form semicolon in value", ct: ctForm, body: "username=bob;x", wantErr: login.ErrAmbiguousCredentials},
	{name: "form key without value", ct: ctForm, body: "username&password=x", wantErr: login.ErrMissingCredentials},
	{name: "form other type ignored", ct: "text/plain", body: "username=alice", wantErr: login.ErrMissingCredentials},
	// Query.
	{name: "query get", method: http.MethodGet, target: "/login?username=alice", want: "alice"},
	{name: "query put", method: http.MethodPut, target: "/login?username=alice", want: "alice"},
	{name: "query key case", target: "/login?UserName=alice", want: "alice"},
	{name: "query vs body", target: "/login?username=victim", ct: ctForm, body: "username=decoy", wantErr: login.ErrAmbiguousCredentials},
	{name: "query vs json", target: "/login?username=victim", ct: ctJSON, body: `{"username":"decoy"}`, wantErr: login.ErrAmbiguousCredentials},
	{name: "query same as body", target: "/login?username=Alice", ct: ctJSON, body: `{"username":"alice"}`, want: "Alice"},
	{name: "query semicolon", target: "/login?x=1;username=victim", ct: ctJSON, body: `{"username":"decoy"}`, wantErr: login.ErrAmbiguousCredentials},
	{name: "query bad escape", target: "/login?username=%E", wantErr: login.ErrInvalidLoginRequest},
	{name: "query none", method: http.MethodGet, target: "/login?next=/home", wantErr: login.ErrMissingCredentials},
	// Multipart.
	{name: "multipart", ct: ctMP, body: mp(field("username", "alice"), field("password", "x")), want: "alice"},
	{name: "multipart name case", ct: ctMP, body: mp(field("UserName", "alice")), want: "alice"},
	{name: "multipart name ext", ct: ctMP, body: mp("Content-Disposition: form-data; name*=UTF-8''username\r\n\r\nalice"), want: "alice"},
	{name: "multipart dup differ", ct: ctMP, body: mp(field("username", "alice"), field("username", "bob")), wantErr: login.ErrAmbiguousCredentials},
	{name: "multipart file part ignored", ct: ctMP, body: mp("Content-Disposition: form-data; name=\"username\"; filename=\"u.txt\"\r\nContent-Type: text/plain\r\n\r\nvictim", field("username", "alice")), want: "alice"},
	{name: "multipart empty filename read", ct: ctMP, body: mp("Content-Disposition: form-data; name=\"username\"; filename=\"\"\r\n\r\nvictim", field("username", "decoy")), wantErr: login.ErrAmbiguousCredentials},
	{name: "multipart quoted-printable", ct: ctMP, body: mp("Content-Disposition: form-data; name=\"username\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n=61lice"), wantErr: login.ErrInvalidLoginRequest},
	{name: "multipart 8bit", ct: ctMP, body: mp("Content-Disposition: form-data; name=\"username\"\r\nContent-Transfer-Encoding: 8bit\r\n\r\nalice"), want: "alice"},
	{name: "multipart too many parts", ct: ctMP, body: mp(field("a", "1"), field("b", "2"), field("c", "3"), field("username", "alice")), opt: login.UsernameOptions{MaxParts: 3}, wantErr: login.ErrInvalidLoginRequest},
	{name: "multipart parts at bound", ct: ctMP, body: mp(field("a", "1"), field("b", "2"), field("username", "alice")), opt: login.UsernameOptions{MaxParts: 3}, want: "alice"},
	{name: "multipart header too large", ct: ctMP, body: mp("Content-Disposition: form-data; name=\"x\"\r\nX-Pad: " + strings.Repeat("p", 200) + "\r\n\r\n1"), opt: login.UsernameOptions{MaxPartHeaderBytes: 128}, wantErr: login.ErrInvalidLoginRequest},
	{name: "multipart field too large", ct: ctMP, body: mp(field("username", strings.Repeat("a", 65))), opt: login.UsernameOptions{MaxFieldBytes: 64}, wantErr: login.ErrInvalidLoginRequest},
	{name: "multipart field at bound", ct: ctMP, body: mp(field("username", strings.Repeat("a", 64))), opt: login.UsernameOptions{MaxFieldBytes: 64}, want: strings.Repeat("a", 64)},
	{name: "multipart no boundary", ct: "multipart/form-data", body: mp(field("username", "alice")), wantErr: login.ErrInvalidLoginRequest},
	{name: "multipart wrong boundary", ct: "multipart/form-data; boundary=other", body: mp(field("username", "alice")), wantErr: login.ErrInvalidLoginRequest},
	{name: "multipart unterminated", ct: ctMP, body: "--b0undary\r\n" + field("username", "alice"), wantErr: login.ErrInvalidLoginRequest},
	{name: "multipart odd boundary", ct: `multipart/form-data; boundary="a'()+_,-./:=? b"`, body: "--a'()+_,-./:=? b\r\n" + field("username", "alice") + "\r\n--a'()+_,-./:=? b--\r\n", want: "alice"},
	{name: "multipart bad disposition", ct: ctMP, body: mp("Content-Disposition: form-data; name=\"username\"; name=\"x\"\r\n\r\nalice"), wantErr: login.ErrInvalidLoginRequest},
	{name: "multipart json preamble", ct: ctMP, body: `{"username":"victim"}` + "\r\n" + mp(field("username", "decoy")), wantErr: login.ErrAmbiguousCredentials},
	{name: "multipart vs query", target: "/login?username=victim", ct: ctMP, body: mp(field("username", "decoy")), wantErr: login.ErrAmbiguousCredentials},
	// Encodings, sizes, headers.
	{name: "gzip refused", ct: ctJSON, body: `{"username":"alice"}`, header: []string{"Content-Encoding", "gzip"}, wantErr: login.ErrUnsupportedContentEncoding},
	{name: "coding list refused", ct: ctJSON, body: `{"username":"alice"}`, header: []string{"Content-Encoding", "identity, br"}, wantErr: login.ErrUnsupportedContentEncoding},
	{name: "identity fine", ct: ctJSON, body: `{"username":"alice"}`, header: []string{"Content-Encoding", "Identity"}, want: "alice"},
	{name: "too large", ct: ctJSON, body: `{"username":"alice","pad":"` + strings.Repeat("x", 100) + `"}`, opt: login.UsernameOptions{MaxBodyBytes: 64}, wantErr: login.ErrBodyTooLarge},
	{name: "repeated content type", ct: ctJSON, body: `{"username":"alice"}`, header: []string{"Content-Type", ctForm}, wantErr: login.ErrInvalidLoginRequest},
	{name: "empty", wantErr: login.ErrMissingCredentials},
	// Basic authentication, only when asked.
	{name: "basic ignored", header: []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))}, wantErr: login.ErrMissingCredentials},
	{name: "basic", header: []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))}, opt: login.UsernameOptions{BasicAuth: true}, want: "alice"},
	{name: "basic vs body", ct: ctJSON, body: `{"username":"decoy"}`, header: []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("victim:pw"))}, opt: login.UsernameOptions{BasicAuth: true}, wantErr: login.ErrAmbiguousCredentials},
	{name: "basic malformed", header: []string{"Authorization", "Basic %%%"}, opt: login.UsernameOptions{BasicAuth: true}, wantErr: login.ErrInvalidLoginRequest},
	{name: "bearer ignored", ct: ctJSON, body: `{"username":"alice"}`, header: []string{"Authorization", "Bearer xyz"}, opt: login.UsernameOptions{BasicAuth: true}, want: "alice"},
	// Several field names are one field.
	{name: "fields agree", ct: ctJSON, body: `{"email":"a@example.com","username":"A@example.com"}`, opt: login.UsernameOptions{Fields: []string{"username", "email"}}, want: "a@example.com"},
	{name: "fields disagree", target: "/login?email=victim", ct: ctJSON, body: `{"username":"decoy"}`, opt: login.UsernameOptions{Fields: []string{"username", "email"}}, wantErr: login.ErrAmbiguousCredentials},
	{name: "other field ignored", ct: ctJSON, body: `{"email":"victim","username":"decoy"}`, want: "decoy"},
}

func TestReadUsername(t *testing.T) {
	for _, c := range credCases {
		t.Run(c.name, func(t *testing.T) {
			r := c.request()
			got, err := login.ReadUsername(r, c.opt)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || got != "" {
					t.Fatalf("got %q, %v; want error %v", got, err, c.wantErr)
				}
			} else if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
			if errors.Is(err, login.ErrBodyTooLarge) || errors.Is(err, login.ErrUnsupportedContentEncoding) || errors.Is(err, login.ErrInvalidOptions) {
				return // the body was not (fully) read
			}
			checkBodyRestored(t, r, c.body)
		})
	}
}

// checkBodyRestored: the next handler, and a proxy retrying through
// GetBody, see exactly the client's bytes with a fixed length.
func checkBodyRestored(t *testing.T, r *http.Request, want string) {
	t.Helper()
	if r.ContentLength != int64(len(want)) || r.TransferEncoding != nil || r.GetBody == nil {
		t.Fatalf("ContentLength %d TransferEncoding %v GetBody %v, want %d bytes", r.ContentLength, r.TransferEncoding, r.GetBody != nil, len(want))
	}
	for i := range 3 {
		body := r.Body
		if i > 0 {
			var err error
			if body, err = r.GetBody(); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(body)
		if err != nil || string(b) != want {
			t.Fatalf("read %d: %q, %v; want %q", i, b, err, want)
		}
		if err := body.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadUsernameChunked: a body of unknown length is read to its end,
// bounded, and put back with a fixed length.
func TestReadUsernameChunked(t *testing.T) {
	body := `{"username":"alice","pad":"` + strings.Repeat("x", 3000) + `"}`
	mk := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/login", iotest.HalfReader(strings.NewReader(body)))
		r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
		r.Header.Set("Content-Type", ctJSON)
		return r
	}
	r := mk()
	if u, err := login.ReadUsername(r, login.UsernameOptions{}); err != nil || u != "alice" {
		t.Fatalf("%q %v", u, err)
	}
	checkBodyRestored(t, r, body)
	for _, max := range []int64{int64(len(body)) - 1, 1, 512, 513} {
		if _, err := login.ReadUsername(mk(), login.UsernameOptions{MaxBodyBytes: max}); !errors.Is(err, login.ErrBodyTooLarge) {
			t.Errorf("MaxBodyBytes %d: %v", max, err)
		}
	}
	r = mk()
	if u, err := login.ReadUsername(r, login.UsernameOptions{MaxBodyBytes: int64(len(body))}); err != nil || u != "alice" {
		t.Fatalf("exact bound: %q %v", u, err)
	}
	checkBodyRestored(t, r, body)
}

// TestReadUsernameBodyErrors: a body that cannot be read is the client's
// fault (invalid_body); an outer MaxBytesReader is a 413.
func TestReadUsernameBodyErrors(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/login", io.MultiReader(strings.NewReader(`{"username":`), iotest.ErrReader(io.ErrUnexpectedEOF)))
	r.ContentLength = 100
	if _, err := login.ReadUsername(r, login.UsernameOptions{}); !errors.Is(err, login.ErrUnreadableBody) {
		t.Errorf("short body: %v", err)
	}
	rec := httptest.NewRecorder()
	r = httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(`{"username":"alice","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`))
	r.ContentLength = -1
	r.Body = http.MaxBytesReader(rec, r.Body, 20)
	if _, err := login.ReadUsername(r, login.UsernameOptions{}); !errors.Is(err, login.ErrBodyTooLarge) {
		t.Errorf("MaxBytesReader: %v", err)
	}
}

func TestUsernameOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		opt  login.UsernameOptions
		want string
	}{
		{login.UsernameOptions{}, ""},
		{login.UsernameOptions{Fields: []string{"username", "email", "e.mail", "user_name", "user-name"}}, ""},
		{login.UsernameOptions{Fields: make([]string, 9)}, "Fields must list at most 8 names, got 9"},
		{login.UsernameOptions{Fields: []string{""}}, "Fields[0] must be 1 to 64 bytes"},
		{login.UsernameOptions{Fields: []string{"ok", "a%"}}, "Fields[1] may hold only"},
		{login.UsernameOptions{Fields: []string{strings.Repeat("a", 65)}}, "Fields[0] must be 1 to 64 bytes"},
		{login.UsernameOptions{MaxBodyBytes: -1}, "MaxBodyBytes must be between 1 and 1048576, got -1"},
		{login.UsernameOptions{MaxBodyBytes: 1 << 20}, ""},
		{login.UsernameOptions{MaxParts: 1001}, "MaxParts must be between 1 and 1000, got 1001"},
		{login.UsernameOptions{MaxPartHeaderBytes: 63}, "MaxPartHeaderBytes must be between 64 and 16384, got 63"},
		{login.UsernameOptions{MaxFieldBytes: 65537}, "MaxFieldBytes must be between 64 and 65536, got 65537"},
	} {
		err := c.opt.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.opt, err)
			}
			continue
		}
		if !errors.Is(err, login.ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opt, err, c.want)
		}
		// ReadUsername refuses the same options before reading anything.
		r := httptest.NewRequest(http.MethodPost, "/login?username=alice", strings.NewReader("x"))
		if _, rerr := login.ReadUsername(r, c.opt); !errors.Is(rerr, login.ErrInvalidOptions) {
			t.Errorf("%+v: ReadUsername %v", c.opt, rerr)
		}
	}
}

// TestProblemFor: every error of the reader and of Evaluate has one
// answer, and none carries the error's text.
func TestProblemFor(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{login.ErrMissingCredentials, 400, wire.CodeMissingCredentials},
		{fmt.Errorf("wrapped: %w", login.ErrMissingCredentials), 400, wire.CodeMissingCredentials},
		{login.ErrAmbiguousCredentials, 400, wire.CodeAmbiguousCredentials},
		{login.ErrInvalidLoginRequest, 400, wire.CodeInvalidLoginRequest},
		{login.ErrInvalidUsername, 400, wire.CodeInvalidLoginRequest},
		{login.ErrInvalidClientIP, 400, wire.CodeInvalidLoginRequest},
		{errors.New("custom reader: secret detail"), 400, wire.CodeInvalidLoginRequest},
		{login.ErrBodyTooLarge, 413, wire.CodePayloadTooLarge},
		{login.ErrUnsupportedContentEncoding, 415, wire.CodeUnsupportedContentEncoding},
		{login.ErrUnreadableBody, 400, wire.CodeInvalidBody},
		{login.ErrInvalidOptions, 500, wire.CodeInternal},
	} {
		p := login.ProblemFor(c.err)
		if p.Status != c.status || p.Code != c.code {
			t.Errorf("%v: %d %s, want %d %s", c.err, p.Status, p.Code, c.status, c.code)
		}
		rec := httptest.NewRecorder()
		login.RejectError(rec, nil, c.err)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), `"code":"`+c.code+`"`) || strings.Contains(rec.Body.String(), "secret") || strings.Contains(rec.Body.String(), "login:") {
			t.Errorf("%v: %d %s", c.err, rec.Code, rec.Body)
		}
	}
}

// TestReadUsernameDoesNotEchoInput: error texts never carry the request's
// data (they may reach logs).
func TestReadUsernameDoesNotEchoInput(t *testing.T) {
	for _, c := range credCases {
		if c.wantErr == nil {
			continue
		}
		_, err := login.ReadUsername(c.request(), c.opt)
		for _, secret := range []string{"alice", "victim", "decoy", "bob"} {
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("%s: error %q carries request data", c.name, err)
			}
		}
	}
}
