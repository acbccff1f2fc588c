package login

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Bounds of [ReadUsername].
const (
	// DefaultUsernameField is the field read when UsernameOptions.Fields
	// is empty.
	DefaultUsernameField = "username"
	// DefaultPasswordField is the field read when
	// UsernameOptions.PasswordField is empty.
	DefaultPasswordField = "password"
	// MaxUsernameFields bounds UsernameOptions.Fields, and
	// MaxUsernameFieldBytes the length of each name.
	MaxUsernameFields     = 8
	MaxUsernameFieldBytes = 64
	// DefaultMaxBodyBytes and MaxMaxBodyBytes: the body read is bounded
	// by UsernameOptions.MaxBodyBytes, 1 to MaxMaxBodyBytes.
	DefaultMaxBodyBytes = 64 << 10
	MaxMaxBodyBytes     = 1 << 20
	// DefaultMaxParts and MaxMaxParts bound the parts of a multipart body.
	DefaultMaxParts = 32
	MaxMaxParts     = 1000
	// DefaultMaxPartHeaderBytes and MaxMaxPartHeaderBytes bound the header
	// section of each multipart part.
	DefaultMaxPartHeaderBytes = 1 << 10
	MaxMaxPartHeaderBytes     = 16 << 10
	// DefaultMaxFieldBytes and MaxMaxFieldBytes bound the value of a
	// username part of a multipart body. It must be at least 64.
	DefaultMaxFieldBytes = 4 << 10
	MaxMaxFieldBytes     = 64 << 10
)

// Errors of [ReadUsername], besides [ErrMissingCredentials]. Each maps to
// one answer through [ProblemFor]; none is counted by the limiter and none
// carries request data in its text.
var (
	// ErrAmbiguousCredentials: the username field appears more than once
	// (in one place or across the query, the body and the Authorization
	// header) with values that are not the same account. Answer 400
	// ambiguous_credentials and do not forward: the throttle and the
	// login handler could read different accounts.
	ErrAmbiguousCredentials = errors.New("login: ambiguous credentials")
	// ErrInvalidLoginRequest: the request cannot be read as its declared
	// type says (malformed JSON, form or multipart, a username that is
	// not a JSON string, a bad percent-escape in the username, a repeated
	// Content-Type). Answer 400 invalid_login_request.
	ErrInvalidLoginRequest = errors.New("login: invalid login request")
	// ErrBodyTooLarge: the body exceeds UsernameOptions.MaxBodyBytes (or
	// an outer http.MaxBytesReader). Answer 413 payload_too_large.
	ErrBodyTooLarge = errors.New("login: request body too large")
	// ErrUnsupportedContentEncoding: the request carries a
	// Content-Encoding other than identity, which the reader will not
	// decode. Answer 415 unsupported_content_encoding.
	ErrUnsupportedContentEncoding = errors.New("login: unsupported content encoding")
	// ErrUnreadableBody: reading the body failed (bad chunked encoding,
	// shorter than its Content-Length, a read timeout). Answer 400
	// invalid_body; it is the client's fault, not the upstream's.
	ErrUnreadableBody = errors.New("login: request body could not be read")
	// ErrInvalidOptions: the UsernameOptions are out of range, a
	// programming error (500). Validate them at start-up with
	// [UsernameOptions.Validate]; [NewMiddleware] does.
	ErrInvalidOptions = errors.New("login: invalid username options")
)

// UsernameOptions configures [ReadUsername]. Zero fields take the
// documented defaults; [UsernameOptions.Validate] names a bad field.
type UsernameOptions struct {
	// Fields names the username field: 1 to MaxUsernameFields names of 1
	// to MaxUsernameFieldBytes bytes of letters, digits, '_', '-' and '.'.
	// Empty means {DefaultUsernameField}. Names are matched
	// case-insensitively in every place. Name every field the login
	// handler may take the username from (for example "username" and
	// "email" if it accepts either): they are one field to this reader.
	// A field the handler reads and the reader does not is a way around
	// the throttle.
	Fields []string
	// MaxBodyBytes bounds the body read: 1 to MaxMaxBodyBytes, 0 means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxParts bounds the parts of a multipart/form-data body, file parts
	// included: 1 to MaxMaxParts, 0 means DefaultMaxParts.
	MaxParts int
	// MaxPartHeaderBytes bounds the header section of one part: 64 to
	// MaxMaxPartHeaderBytes, 0 means DefaultMaxPartHeaderBytes.
	MaxPartHeaderBytes int
	// MaxFieldBytes bounds the value of a username part: 64 to
	// MaxMaxFieldBytes, 0 means DefaultMaxFieldBytes.
	MaxFieldBytes int
	// BasicAuth also reads the user name of an "Authorization: Basic"
	// header, for handlers that accept it. Off by default: a deployment
	// that puts Basic authentication in front of the login page would
	// otherwise make every login ambiguous.
	BasicAuth bool
	// PasswordField names the password field, looked for in the same
	// places as the username (query, JSON, form, multipart) under the
	// same rules; with BasicAuth, the password of Basic credentials
	// counts too. The reader does not keep the password: it only reports
	// whether the request carries one ([Credentials.Password]), which
	// makes it a login attempt whose success may clear the account's
	// failure count. Same character set and length as Fields, and not
	// one of them; empty means DefaultPasswordField.
	PasswordField string
	// Folding says when two occurrences of the username are the same
	// account (otherwise [ErrAmbiguousCredentials]); the zero value is
	// [FoldUnicode]. Give the Limiter the same.
	Folding Folding
}

// Validate reports the first out-of-range setting, wrapping
// [ErrInvalidOptions].
func (o UsernameOptions) Validate() error {
	_, err := o.resolve()
	return err
}

func (o UsernameOptions) resolve() (UsernameOptions, error) {
	bad := func(format string, args ...any) (UsernameOptions, error) {
		return UsernameOptions{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	if len(o.Fields) == 0 {
		o.Fields = defaultFields
	}
	if o.PasswordField == "" {
		o.PasswordField = DefaultPasswordField
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxParts == 0 {
		o.MaxParts = DefaultMaxParts
	}
	if o.MaxPartHeaderBytes == 0 {
		o.MaxPartHeaderBytes = DefaultMaxPartHeaderBytes
	}
	if o.MaxFieldBytes == 0 {
		o.MaxFieldBytes = DefaultMaxFieldBytes
	}
	switch {
	case len(o.Fields) > MaxUsernameFields:
		return bad("Fields must list at most %d names, got %d", MaxUsernameFields, len(o.Fields))
	case o.MaxBodyBytes < 1 || o.MaxBodyBytes > MaxMaxBodyBytes:
		return bad("MaxBodyBytes must be between 1 and %d, got %d", MaxMaxBodyBytes, o.MaxBodyBytes)
	case o.MaxParts < 1 || o.MaxParts > MaxMaxParts:
		return bad("MaxParts must be between 1 and %d, got %d", MaxMaxParts, o.MaxParts)
	case o.MaxPartHeaderBytes < 64 || o.MaxPartHeaderBytes > MaxMaxPartHeaderBytes:
		return bad("MaxPartHeaderBytes must be between 64 and %d, got %d", MaxMaxPartHeaderBytes, o.MaxPartHeaderBytes)
	case o.MaxFieldBytes < 64 || o.MaxFieldBytes > MaxMaxFieldBytes:
		return bad("MaxFieldBytes must be between 64 and %d, got %d", MaxMaxFieldBytes, o.MaxFieldBytes)
	case !o.Folding.valid():
		return bad("Folding must be FoldUnicode or FoldLower, got %v", o.Folding)
	}
	for i, f := range o.Fields {
		if why := fieldNameProblem(f); why != "" {
			return bad("Fields[%d] %s", i, why)
		}
		if strings.EqualFold(f, o.PasswordField) {
			return bad("Fields[%d] is also the PasswordField", i)
		}
	}
	if why := fieldNameProblem(o.PasswordField); why != "" {
		return bad("PasswordField %s", why)
	}
	return o, nil
}

// fieldNameProblem says what is wrong with a field name, or "".
func fieldNameProblem(f string) string {
	if len(f) == 0 || len(f) > MaxUsernameFieldBytes {
		return fmt.Sprintf("must be 1 to %d bytes", MaxUsernameFieldBytes)
	}
	for j := 0; j < len(f); j++ {
		c := f[j]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return "may hold only letters, digits, '_', '-' and '.'"
		}
	}
	return ""
}

var defaultFields = []string{DefaultUsernameField}

// Credentials is what [ReadCredentials] found in a login request.
type Credentials struct {
	// Username is the first occurrence of the username as sent (query
	// first); [Limiter.Evaluate] normalizes it.
	Username string
	// Password reports that the request carries a non-empty password
	// (UsernameOptions.PasswordField, or the password of Basic
	// credentials with UsernameOptions.BasicAuth): it is a login
	// attempt, and a success answer to it may clear the account's
	// failure count. A request without one (a login page fetched with
	// ?username=victim) only counts against the throttle.
	Password bool
}

// ReadCredentials reads a login request as [ReadUsername] does, and also
// reports whether it carries a password ([Credentials.Password]).
func ReadCredentials(r *http.Request, opt UsernameOptions) (Credentials, error) {
	m := Message{Fields: HeaderFields(r.Header), ContentLength: r.ContentLength}
	if r.URL != nil {
		m.Query = r.URL.RawQuery
	}
	if r.Body != nil && r.Body != http.NoBody {
		m.Body = r.Body
	}
	c, body, err := ReadMessage(m, opt, nil)
	if errors.Is(err, ErrBodyTooLarge) || errors.Is(err, ErrUnreadableBody) || errors.Is(err, ErrUnsupportedContentEncoding) || errors.Is(err, ErrInvalidOptions) {
		return Credentials{}, err
	}
	if m.Body != nil {
		_ = r.Body.Close()
	}
	setBody(r, body)
	return c, err
}

// A Message is a login request as [ReadMessage] reads it, whatever
// serves it: net/http ([ReadCredentials] makes one of an *http.Request)
// or an engine of its own that has the request as bytes.
type Message struct {
	// Query is the raw query string (without the '?').
	Query string
	// Fields looks the header fields up; nil means none.
	Fields Fields
	// Body is the request body, read to its end within
	// UsernameOptions.MaxBodyBytes; nil means none. A read error that is
	// or wraps ErrBodyTooLarge or *http.MaxBytesError (an outer bound)
	// is ErrBodyTooLarge, any other ErrUnreadableBody.
	Body io.Reader
	// ContentLength is the announced length of Body, -1 when unknown
	// (chunked): a length over the bound is refused before anything is
	// read.
	ContentLength int64
}

// Fields gives [ReadMessage] a request's header fields: Value returns
// the i-th value (from 0) of the field named name (canonical form, such
// as "Content-Type"), ok false past the last. A value may share memory
// with the request (see [ReadMessage]).
type Fields interface {
	Value(name string, i int) (v string, ok bool)
}

// HeaderFields is the [Fields] of an http.Header (canonical keys).
func HeaderFields(h http.Header) Fields { return headerFields(h) }

type headerFields http.Header

func (h headerFields) Value(name string, i int) (string, bool) {
	vs := h[name]
	if i < len(vs) {
		return vs[i], true
	}
	return "", false
}

// ReadMessage is the one credential reader: [ReadCredentials] and
// [ReadUsername] are ReadMessage on an *http.Request. It refuses a
// Content-Encoding other than identity, reads m.Body in full (appended
// to buf, which may be nil, and returned: the very bytes received, for
// the handler), bounded by opt.MaxBodyBytes, and reads the username and
// whether a password is present from the query, the body and, with
// opt.BasicAuth, the Authorization field, under the rules of
// [ReadUsername]. The body is returned whenever it was read in full,
// whatever the error; it is nil when the body was too large or could
// not be read (or when there is none).
//
// The Username returned may share memory with body, m.Query and the
// values of m.Fields: it is valid as long as they are unchanged (copy
// it to keep it).
func ReadMessage(m Message, opt UsernameOptions, buf []byte) (c Credentials, body []byte, err error) {
	opt, err = opt.resolve()
	if err != nil {
		return Credentials{}, nil, err
	}
	f := m.Fields
	if f == nil {
		f = noFields{}
	}
	for i := 0; ; i++ {
		v, ok := f.Value("Content-Encoding", i)
		if !ok {
			break
		}
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if t := strings.TrimSpace(tok); t != "" && !strings.EqualFold(t, "identity") {
				return Credentials{}, nil, ErrUnsupportedContentEncoding
			}
		}
	}
	if m.Body != nil {
		if body, err = readBody(m.Body, m.ContentLength, opt.MaxBodyBytes, buf); err != nil {
			return Credentials{}, nil, err
		}
	}
	col := collector{fields: opt.Fields, password: opt.PasswordField, fold: opt.Folding}
	if err := col.pairs(m.Query); err != nil {
		return Credentials{}, body, err
	}
	if opt.BasicAuth {
		if err := col.basicAuth(f); err != nil {
			return Credentials{}, body, err
		}
	}
	if err := col.body(f, body, opt); err != nil {
		return Credentials{}, body, err
	}
	u, err := col.result()
	if err != nil {
		return Credentials{}, body, err
	}
	return Credentials{Username: u, Password: col.hasPassword}, body, nil
}

type noFields struct{}

func (noFields) Value(string, int) (string, bool) { return "", false }

// ReadUsername returns the username of a login request, read from every
// place common web frameworks read a form field from:
//
//   - the query string, which many frameworks (Flask, Servlet, Spring)
//     consult first, for every method; pairs are separated by '&' and
//     also, as some frameworks do, by ';';
//   - a JSON object body (top-level members only), whether or not the
//     Content-Type says JSON: some decoders (gin's ShouldBindJSON, a
//     plain json.Decoder) ignore it. A body declared as JSON must be
//     exactly one valid JSON object; an undeclared body counts as JSON
//     when it starts with a valid JSON object;
//   - an application/x-www-form-urlencoded body (also when the
//     Content-Type is missing);
//   - a multipart/form-data body, bounded by MaxParts,
//     MaxPartHeaderBytes and MaxFieldBytes; file parts (a non-empty
//     filename) are skipped, and a username part with a
//     Content-Transfer-Encoding is refused rather than decoded;
//   - with opt.BasicAuth, an "Authorization: Basic" header.
//
// Field names match case-insensitively everywhere (Unicode simple
// folding, as encoding/json does), after percent-decoding. The username
// may appear any number of times if every occurrence is the same account
// (equal after opt.Folding's Normalize); otherwise the answer is
// [ErrAmbiguousCredentials]. Absent everywhere, or blank, it is
// [ErrMissingCredentials]; not valid UTF-8, [ErrInvalidLoginRequest]. The
// username returned is the first occurrence as sent (query first);
// [Limiter.Evaluate] normalizes it.
//
// The body is read in full, bounded by opt.MaxBodyBytes
// ([ErrBodyTooLarge]); a Content-Encoding other than identity is refused
// before anything is read ([ErrUnsupportedContentEncoding]). Once the
// body has been read — whatever the answer, unless the body was too large
// or could not be read — the request is left usable by the next handler:
// r.Body yields the very same bytes, r.GetBody returns them again (so a
// proxy can retry), r.ContentLength is their length and
// r.TransferEncoding is cleared.
//
// Every method counts: a GET with the field in its query string is a
// login attempt. Callers decide what to do with a request that carries no
// username: a safe method (GET, HEAD, OPTIONS, TRACE) without one is
// usually a login page on the same path and should pass uncounted (the
// middleware does that); any other is answered 400 missing_credentials.
//
// Errors map to answers through [ProblemFor]. Options out of range yield
// [ErrInvalidOptions].
func ReadUsername(r *http.Request, opt UsernameOptions) (username string, err error) {
	c, err := ReadCredentials(r, opt)
	return c.Username, err
}

// collector gathers every occurrence of the username field, and whether
// a password is present.
type collector struct {
	fields      []string
	password    string // the password field's name
	fold        Folding
	value       string
	found       bool
	ambiguous   bool
	invalid     bool // a value is not valid UTF-8
	hasPassword bool
}

// fieldKind is what a field name is to the collector.
type fieldKind uint8

const (
	otherField fieldKind = iota
	usernameField
	passwordField
)

func (c *collector) add(v string) {
	if !utf8.ValidString(v) {
		c.invalid = true
		return
	}
	switch {
	case !c.found:
		c.value, c.found = v, true
	case v == c.value || c.ambiguous:
	case c.fold.Normalize(v) != c.fold.Normalize(c.value):
		c.ambiguous = true
	}
}

func (c *collector) result() (string, error) {
	switch {
	case c.invalid:
		return "", fmt.Errorf("%w: the username is not valid UTF-8", ErrInvalidLoginRequest)
	case c.ambiguous:
		return "", ErrAmbiguousCredentials
	case !c.found || strings.TrimSpace(c.value) == "":
		return "", ErrMissingCredentials
	}
	return c.value, nil
}

// kind says whether name is one of the username fields or the password
// field.
func (c *collector) kind(name string) fieldKind {
	for _, f := range c.fields {
		if strings.EqualFold(name, f) {
			return usernameField
		}
	}
	if c.password != "" && strings.EqualFold(name, c.password) {
		return passwordField
	}
	return otherField
}

// pairs reads a query string or a URL-encoded form: the pairs split on
// '&' and, when a pair holds ';', also the pairs split on ';' — the two
// interpretations frameworks differ on. A value found under either counts.
func (c *collector) pairs(s string) error {
	for seg := range strings.SplitSeq(s, "&") {
		if err := c.pair(seg); err != nil {
			return err
		}
		if strings.IndexByte(seg, ';') >= 0 {
			for sub := range strings.SplitSeq(seg, ";") {
				if err := c.pair(sub); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (c *collector) pair(seg string) error {
	if seg == "" {
		return nil
	}
	k, v, _ := strings.Cut(seg, "=")
	switch c.keyKind(k) {
	case otherField:
		return nil
	case passwordField:
		if v != "" {
			c.hasPassword = true
		}
		return nil
	}
	val, ok := unescape(v)
	if !ok {
		return fmt.Errorf("%w: bad percent-escape in the username", ErrInvalidLoginRequest)
	}
	c.add(val)
	return nil
}

// keyKind compares a URL-encoded key with the field names without
// allocating. Invalid escapes stay as they are (as lenient decoders
// leave them); since field names hold no '%', such a key never matches.
func (c *collector) keyKind(k string) fieldKind {
	if strings.IndexByte(k, '%') < 0 && strings.IndexByte(k, '+') < 0 {
		return c.kind(k)
	}
	if len(k) > 3*MaxUsernameFieldBytes {
		return otherField
	}
	var buf [MaxUsernameFieldBytes]byte
	n := 0
	for i := 0; i < len(k); i++ {
		if n == len(buf) {
			return otherField
		}
		b := k[i]
		switch {
		case b == '+':
			b = ' '
		case b == '%' && i+2 < len(k) && ishex(k[i+1]) && ishex(k[i+2]):
			b = unhex(k[i+1])<<4 | unhex(k[i+2])
			i += 2
		}
		buf[n] = b
		n++
	}
	return c.kind(string(buf[:n])) // the conversion does not escape
}

// unescape decodes a URL-encoded value ('+' is a space); ok is false for
// an invalid escape.
func unescape(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '+':
			b = append(b, ' ')
		case '%':
			if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
				return "", false
			}
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, s[i])
		}
	}
	return string(b), true
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func (c *collector) basicAuth(f Fields) error {
	v, ok := f.Value("Authorization", 0)
	if !ok {
		return nil
	}
	if _, more := f.Value("Authorization", 1); more {
		return fmt.Errorf("%w: repeated Authorization", ErrAmbiguousCredentials)
	}
	scheme, _, _ := strings.Cut(strings.TrimSpace(v), " ")
	if !strings.EqualFold(scheme, "Basic") {
		return nil
	}
	r := http.Request{Header: http.Header{"Authorization": {v}}}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return fmt.Errorf("%w: malformed Basic credentials", ErrInvalidLoginRequest)
	}
	c.add(user)
	if pass != "" {
		c.hasPassword = true
	}
	return nil
}

// body reads the username from body as its Content-Type says, and as
// JSON whenever it starts with a JSON object.
func (c *collector) body(f Fields, body []byte, opt UsernameOptions) error {
	if len(body) == 0 {
		return nil
	}
	if _, more := f.Value("Content-Type", 1); more {
		return fmt.Errorf("%w: repeated Content-Type", ErrInvalidLoginRequest)
	}
	ct, _ := f.Value("Content-Type", 0)
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	switch {
	case isJSONType(mt):
		return c.json(body, true)
	case mt == "" || strings.EqualFold(mt, "application/x-www-form-urlencoded"):
		if err := c.pairs(bytesString(body)); err != nil {
			return err
		}
	case strings.EqualFold(mt, "multipart/form-data"):
		if err := c.multipart(ct, body, opt); err != nil {
			return err
		}
	}
	return c.json(body, false)
}

func isJSONType(mt string) bool {
	if strings.EqualFold(mt, "application/json") {
		return true
	}
	// Any structured-syntax "+json" type, e.g. application/vnd.api+json.
	return len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json") && strings.IndexByte(mt, '/') > 0
}

// json reads the top-level members of a JSON object body. Declared JSON
// must be exactly one valid object (surrounding white space and a UTF-8
// byte order mark aside); otherwise the body counts only if it starts
// with a valid object, and what follows it is ignored, as a streaming
// decoder would.
func (c *collector) json(body []byte, declared bool) error {
	b := bytes.TrimPrefix(body, utf8BOM)
	i := skipWS(b, 0)
	if i == len(b) || b[i] != '{' {
		if declared {
			return fmt.Errorf("%w: the JSON body is not an object", ErrInvalidLoginRequest)
		}
		return nil
	}
	end := validEnd(b, i)
	if declared {
		if end < 0 || skipWS(b, end) != len(b) {
			return fmt.Errorf("%w: the JSON body is not one valid object", ErrInvalidLoginRequest)
		}
	} else if end < 0 {
		return nil
	}
	return c.jsonMembers(b[i:end])
}

// maxJSONDepth is the deepest nesting of arrays and objects validEnd
// accepts: encoding/json's (json.Valid refuses a 10,001st level).
const maxJSONDepth = 10000

// validEnd returns the index just past the JSON object or array that
// starts at b[i] when it is one valid JSON value, or -1: in one pass,
// b[i:validEnd(b, i)] is valid exactly when json.Valid says so of the
// value valueEnd finds there (FuzzValidEnd compares the two). Like
// json.Valid it checks the grammar, escapes and the nesting depth,
// not that strings are UTF-8.
func validEnd(b []byte, i int) int {
	var shallow [1]uint64 // most bodies nest less than 64 levels
	if end, deeper := validEndIn(b, i, shallow[:]); !deeper {
		return end
	}
	var deep [(maxJSONDepth + 63) / 64]uint64
	end, _ := validEndIn(b, i, deep[:])
	return end
}

// validEndIn is validEnd keeping in objects (bit d: level d is an
// object) the levels it is in; deeper reports that the value nests
// deeper than objects holds (and no deeper than maxJSONDepth).
func validEndIn(b []byte, i int, objects []uint64) (end int, deeper bool) {
	if i >= len(b) || b[i] != '{' && b[i] != '[' {
		return -1, false
	}
	depth := 0
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return -1, false
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth == maxJSONDepth {
				return -1, false
			}
			if depth == len(objects)*64 {
				return -1, true
			}
			i = skipWS(b, i+1)
			if i < len(b) && (c == '{' && b[i] == '}' || c == '[' && b[i] == ']') {
				i++
				break // an empty one: a complete value
			}
			if c == '{' {
				objects[depth/64] |= 1 << (depth % 64)
			} else {
				objects[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			if c == '{' {
				if i = memberValue(b, i); i < 0 {
					return -1, false
				}
			}
			continue
		case '"':
			i = stringEnd(b, i)
		case 't':
			i = literalEnd(b, i, "true")
		case 'f':
			i = literalEnd(b, i, "false")
		case 'n':
			i = literalEnd(b, i, "null")
		default:
			i = numberEnd(b, i)
		}
		if i < 0 {
			return -1, false
		}
		// A value ended at b[i]: close what it ends, or go on to the
		// next element.
		for {
			if depth == 0 {
				return i, false
			}
			obj := objects[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			j := skipWS(b, i)
			if j >= len(b) {
				return -1, false
			}
			if obj && b[j] == '}' || !obj && b[j] == ']' {
				depth--
				i = j + 1
				continue
			}
			if b[j] != ',' {
				return -1, false
			}
			i = skipWS(b, j+1)
			if obj {
				if i = memberValue(b, i); i < 0 {
					return -1, false
				}
			}
			break
		}
	}
}

// memberValue reads an object member's name and colon at b[i] and
// returns where its value starts, or -1.
func memberValue(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = stringEnd(b, i); i < 0 {
		return -1
	}
	if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipWS(b, i+1)
}

// stringEnd returns the index just past the valid JSON string that
// starts at b[i] ('"'), or -1.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			if i++; i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// literalEnd returns the index just past lit at b[i], or -1.
func literalEnd(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// numberEnd returns the index just past the JSON number that starts at
// b[i], or -1: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digitsEnd(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		i = digitsEnd(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		i = digitsEnd(b, i)
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitsEnd(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

var utf8BOM = []byte("\xef\xbb\xbf")

// jsonMembers walks the members of obj, a valid JSON object.
func (c *collector) jsonMembers(obj []byte) error {
	i := skipWS(obj, 1) // past '{'
	for i < len(obj) && obj[i] == '"' {
		kEnd := valueEnd(obj, i)
		if kEnd < 0 {
			return fmt.Errorf("%w: malformed JSON", ErrInvalidLoginRequest) // unreachable for valid JSON
		}
		key := obj[i:kEnd]
		i = skipWS(obj, kEnd)
		i = skipWS(obj, i+1) // past ':'
		vEnd := valueEnd(obj, i)
		if vEnd < 0 {
			return fmt.Errorf("%w: malformed JSON", ErrInvalidLoginRequest)
		}
		switch c.jsonKeyKind(key) {
		case passwordField:
			// A non-empty string; any other value is not a password a
			// handler would check.
			if v := obj[i:vEnd]; len(v) > 2 && v[0] == '"' {
				c.hasPassword = true
			}
		case usernameField:
			v := obj[i:vEnd]
			if v[0] != '"' {
				return fmt.Errorf("%w: the username is not a JSON string", ErrInvalidLoginRequest)
			}
			s, err := jsonString(v)
			if err != nil {
				return fmt.Errorf("%w: malformed JSON string", ErrInvalidLoginRequest)
			}
			c.add(s)
		}
		i = skipWS(obj, vEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
	return nil
}

func (c *collector) jsonKeyKind(key []byte) fieldKind {
	inner := key[1 : len(key)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		if len(inner) > MaxUsernameFieldBytes {
			return otherField
		}
		return c.kind(string(inner)) // the conversion does not escape
	}
	s, err := jsonString(key)
	if err != nil {
		return otherField
	}
	return c.kind(s)
}

// jsonString decodes a valid JSON string literal.
func jsonString(lit []byte) (string, error) {
	inner := lit[1 : len(lit)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return bytesString(inner), nil // shares the body's memory
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the JSON value that starts at
// b[i], found structurally (strings and nesting), or -1 if it does not
// end. It does not validate: callers run json.Valid on the result, or
// rely on an earlier check.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return -1
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := valueEnd(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// multipart reads the username parts of a multipart/form-data body.
func (c *collector) multipart(ct string, body []byte, opt UsernameOptions) error {
	_, params, err := mime.ParseMediaType(ct)
	if err != nil || params["boundary"] == "" {
		return fmt.Errorf("%w: multipart without a usable boundary", ErrInvalidLoginRequest)
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for n := 0; ; n++ {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: malformed multipart body", ErrInvalidLoginRequest)
		}
		if n >= opt.MaxParts {
			return fmt.Errorf("%w: more than %d parts", ErrInvalidLoginRequest, opt.MaxParts)
		}
		if headerBytes(p.Header) > opt.MaxPartHeaderBytes {
			return fmt.Errorf("%w: part header over %d bytes", ErrInvalidLoginRequest, opt.MaxPartHeaderBytes)
		}
		cds := p.Header["Content-Disposition"]
		if len(cds) == 0 {
			continue
		}
		if len(cds) > 1 {
			return fmt.Errorf("%w: repeated Content-Disposition", ErrInvalidLoginRequest)
		}
		disp, dp, err := mime.ParseMediaType(cds[0])
		if err != nil {
			return fmt.Errorf("%w: malformed Content-Disposition", ErrInvalidLoginRequest)
		}
		// A non-empty filename makes a file part everywhere; an empty one
		// is a plain field to some parsers (Go's) and a file to others, so
		// it is read.
		if disp != "form-data" || dp["filename"] != "" {
			continue
		}
		switch c.kind(dp["name"]) {
		case otherField:
			continue
		case passwordField:
			// Whether it is empty is all that matters: one byte tells.
			var one [1]byte
			if n, _ := io.ReadFull(p, one[:]); n == 1 {
				c.hasPassword = true
			}
			continue
		}
		switch cte := strings.ToLower(strings.TrimSpace(p.Header.Get("Content-Transfer-Encoding"))); cte {
		case "", "7bit", "8bit", "binary":
		default:
			return fmt.Errorf("%w: content-transfer-encoded username part", ErrInvalidLoginRequest)
		}
		v, err := io.ReadAll(io.LimitReader(p, int64(opt.MaxFieldBytes)+1))
		if err != nil {
			return fmt.Errorf("%w: malformed multipart body", ErrInvalidLoginRequest)
		}
		if len(v) > opt.MaxFieldBytes {
			return fmt.Errorf("%w: username part over %d bytes", ErrInvalidLoginRequest, opt.MaxFieldBytes)
		}
		c.add(string(v))
	}
}

func headerBytes(h textproto.MIMEHeader) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	return n
}

// readBody reads body in full, at most max bytes, appended to buf;
// contentLength is the announced length, -1 when unknown.
func readBody(body io.Reader, contentLength, max int64, buf []byte) ([]byte, error) {
	if contentLength > max {
		return nil, ErrBodyTooLarge
	}
	limit := max + 1
	size := int64(512)
	if contentLength >= 0 {
		size = contentLength + 1 // room to see EOF without growing
	}
	if want := min(size, limit); int64(cap(buf)) < want {
		buf = make([]byte, 0, want)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= limit {
				return nil, ErrBodyTooLarge
			}
			buf = append(buf, 0)[:len(buf)] // grow
			if int64(cap(buf)) > limit {
				buf = buf[:len(buf):limit]
			}
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return nil, ErrBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) || errors.Is(err, ErrBodyTooLarge) {
				return nil, ErrBodyTooLarge
			}
			return nil, ErrUnreadableBody
		}
	}
	return buf, nil
}

// bytesString is b as a string sharing its memory: for bytes that do
// not change while the string is in use (a body read in full).
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// replayBody is a request body put back by ReadUsername: the bytes read
// from the client, already consumed from the connection.
type replayBody struct {
	bytes.Reader
}

func (*replayBody) Close() error { return nil }

func setBody(r *http.Request, b []byte) {
	r.ContentLength = int64(len(b))
	r.TransferEncoding = nil
	if len(b) == 0 {
		r.Body = http.NoBody
		r.GetBody = noBody
		return
	}
	rb := &replayBody{}
	rb.Reset(b)
	r.Body = rb
	r.GetBody = func() (io.ReadCloser, error) {
		rb := &replayBody{}
		rb.Reset(b)
		return rb, nil
	}
}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// bodyConsumed reports whether r's body was read to its end by
// ReadUsername (or there is none), so that answering early leaves no
// unread bytes on the connection.
func bodyConsumed(r *http.Request) bool {
	if r == nil {
		return false
	}
	_, ok := r.Body.(*replayBody)
	return ok || r.Body == http.NoBody
}
