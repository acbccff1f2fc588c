// Package wire writes Bulwark's HTTP answers: RFC 9457 problem details with
// a stable machine code, integer-second Retry-After, and the rate-limit
// header fields. Every protection layer answers through it so that clients
// see one consistent, low-sensitivity format.
//
// Nothing written here may carry a client address, a username, a
// credential, SQL, a connection string or a stack trace: callers pass only
// fixed codes and fixed titles.
package wire

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/bulwarkhq/bulwark/limit"
)

// ContentType is the media type of problem details (RFC 9457).
const ContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object. Code is Bulwark's stable
// machine-readable code (see [Codes]). Leave Title and Detail empty: Write
// fills Title with the HTTP status phrase (RFC 9457 §4.2.1 asks exactly
// that of problems whose type is "about:blank") and Detail with the code's
// fixed sentence. Detail must never contain request data or internal
// error text. [New] builds a Problem from a code alone.
type Problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail,omitempty"`
	// Type defaults to "about:blank" when empty.
	Type string `json:"type"`
	// RetryAfter, when > 0, is echoed as the integer "retryAfter" member
	// (seconds) and also set as the Retry-After header by Write.
	RetryAfter int64 `json:"retryAfter,omitempty"`
	// Extra holds additional members (for example the login layer's
	// "errorCode"). Keys must not collide with the fields above, nor
	// with "request_id" (see Write).
	Extra map[string]any `json:"-"`
}

// complete fills the defaults Write applies: a valid status, the type,
// the title and the code's detail.
func (p Problem) complete() Problem {
	if p.Status < 400 || p.Status > 599 {
		p.Status = http.StatusInternalServerError
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	if p.Detail == "" {
		if ci, ok := registry[p.Code]; ok {
			p.Detail = ci.detail
		}
	}
	return p
}

// Write sends p as application/problem+json with status p.Status. When
// p.RetryAfter > 0 it also sets the Retry-After header. When the
// response already carries a request ID (RequestIDField, set by the host
// before any handler runs) the body repeats it as the "request_id"
// member. A Status outside
// [400, 599] is a caller bug; it is sent as 500 rather than passed to
// WriteHeader, which would panic on an invalid code. Write never reads the
// request body and never panics.
//
// The constant fields are set to shared one-element slices, and the body
// is encoded into a pooled buffer, so a problem whose members are plain
// ASCII (every registered code is) costs only its Content-Length value in
// allocations, and none when w lends storage for it ([FieldStore]): a
// rejection under a flood must be cheap. Handlers must replace header
// values (Set, Del), never write into a value slice.
func Write(w http.ResponseWriter, p Problem) {
	p = p.complete()
	h := w.Header()
	bp := bodyBufs.Get().(*[]byte)
	body, ok := p.appendTo((*bp)[:0], requestIDOf(h))
	if !ok {
		p.Status, p.RetryAfter = http.StatusInternalServerError, 0
	}
	h["Content-Type"] = contentTypeValue
	h["Cache-Control"] = noStoreValue
	h["X-Content-Type-Options"] = nosniffValue
	// Content-Length and Retry-After: one string and one slice for both.
	var nb [40]byte
	num := strconv.AppendInt(nb[:0], int64(len(body)), 10)
	cl := len(num)
	if p.RetryAfter > 0 {
		num = strconv.AppendInt(num, p.RetryAfter, 10)
	}
	nums, vals := HeaderValues(w, num, 2)
	vals[0] = nums[:cl]
	h["Content-Length"] = vals[0:1:1]
	if p.RetryAfter > 0 {
		vals[1] = nums[cl:]
		h["Retry-After"] = vals[1:2:2]
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
	if cap(body) <= bodyBufKeep {
		*bp = body[:0]
	}
	bodyBufs.Put(bp)
}

// A FieldStore lends storage of its own for the header values of the
// answer being written: an http.ResponseWriter that implements it (the
// fast engine's h1.Exchange) lets [Write], [SetRateLimitOn] and the
// protection layers' writers set their values without allocating. The
// storage is reused for the next request: a value made from it is valid
// until the answer is written, and must not be kept past the request.
type FieldStore interface {
	// FieldValues lends size bytes (buf, length and capacity size) and
	// n empty strings (vals, length and capacity n) of the writer's
	// storage for header values of the current answer, left unchanged
	// by the writer until the request ends; ok is false when it has no
	// room left for them.
	FieldValues(size, n int) (buf []byte, vals []string, ok bool)
}

// HeaderValues returns b as a string and a slice of n strings (length
// and capacity n) for the header values of w's answer: in w's own
// storage when w is a [FieldStore] with room (valid during the request
// only), otherwise newly allocated, one string and one array. w may be
// nil. Give each field a full slice expression of vals
// (vals[i:i+1:i+1]) so that appending to one field cannot write into
// another.
func HeaderValues(w http.ResponseWriter, b []byte, n int) (string, []string) {
	// (b is not passed to the interface's method: it would escape, and
	// the callers' stack buffers with it.)
	if fs, ok := w.(FieldStore); ok {
		if buf, vals, ok := fs.FieldValues(len(b), n); ok && len(buf) == len(b) && len(vals) == n {
			copy(buf, b)
			return unsafe.String(unsafe.SliceData(buf), len(buf)), vals
		}
	}
	return string(b), make([]string, n)
}

// requestIDOf returns the request ID of a response header, or "" when it
// has none or one that is not valid.
func requestIDOf(h http.Header) string {
	if v := h[RequestIDField]; len(v) == 1 && ValidRequestID(v[0]) {
		return v[0]
	}
	return ""
}

// Shared values of the constant fields Write sets (see Write).
var (
	contentTypeValue = []string{ContentType}
	noStoreValue     = []string{"no-store"}
	nosniffValue     = []string{"nosniff"}
	closeValue       = []string{"close"}
)

// bodyBufs holds problem bodies being written; a buffer is kept only up
// to bodyBufKeep bytes.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const bodyBufKeep = 4 << 10

// WriteClose is Write for a rejection that happens before the request body
// was read, where the connection should not be reused: over HTTP/1.x it
// adds "Connection: close" and expires the request's read side, so unread
// body or pipelined bytes cannot keep the connection busy. (Without the
// expiry net/http, after sending the answer, keeps reading an announced
// body of up to 256 KiB looking for its end, so a client that announces a
// small body and never sends it would hold the connection until the
// server's read timeout.)
//
// Over HTTP/2 and HTTP/3 it is plain Write: the rejection ends only its
// stream. Go's HTTP/2 server turns "Connection: close" into a GOAWAY for
// the whole connection, and one abuser behind a multiplexing load balancer
// would otherwise churn the connection every client shares.
func WriteClose(w http.ResponseWriter, r *http.Request, p Problem) {
	endConnection(w, r)
	Write(w, p)
}

// endConnection makes an HTTP/1.x connection (or one of unknown
// protocol: r nil) close after the answer, as WriteClose says.
func endConnection(w http.ResponseWriter, r *http.Request) {
	if r == nil || r.ProtoMajor < 2 {
		w.Header()["Connection"] = closeValue
		_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0)) // any past instant
	}
}

// Reject is Write for a rejection that happens before the request body
// was read, on a connection worth keeping: the HTTP/1.x connection is
// closed (as by WriteClose) only when the request announced a body that
// is still unread; a bodiless request keeps its keep-alive connection.
// Over HTTP/2 only the stream ends.
func Reject(w http.ResponseWriter, r *http.Request, p Problem) {
	if UnreadBody(r) {
		WriteClose(w, r, p)
		return
	}
	Write(w, p)
}

// UnreadBody reports whether r is an HTTP/1.x request that announced a
// body its handler has not been given a chance to read (the case where
// Reject closes the connection). A nil r has none.
func UnreadBody(r *http.Request) bool {
	return r != nil && r.ProtoMajor < 2 && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// internalBody is the fixed answer when a problem cannot be encoded.
const internalBody = `{"code":"internal","status":500,"title":"Internal error","type":"about:blank"}` + "\n"

// fixedProblem has the members of Problem in the sorted order that
// encoding/json uses for maps, so both encodings produce identical bytes.
type fixedProblem struct {
	Code       string `json:"code"`
	Detail     string `json:"detail,omitempty"`
	RequestID  string `json:"request_id,omitempty"`
	RetryAfter int64  `json:"retryAfter,omitempty"`
	Status     int    `json:"status"`
	Title      string `json:"title"`
	Type       string `json:"type"`
}

// encode renders p, with the request ID id unless it is empty; ok is
// false when an Extra value cannot be encoded, in which case the fixed
// internal-error body is returned.
func (p Problem) encode(id string) (body []byte, ok bool) { return p.appendTo(nil, id) }

// appendTo appends p's body to b, byte for byte what encoding/json
// produces for it (members in sorted order, as json.Marshal writes a map;
// a newline at the end). Plain members are written directly; a string
// that encoding/json would escape, an Extra value other than a string, an
// integer or a bool, more than maxDirect members or an Extra key that
// names a standard member go through encoding/json instead.
// id is the request ID ("request_id"), or "" for none.
func (p Problem) appendTo(b []byte, id string) (body []byte, ok bool) {
	if out, ok := p.appendDirect(b, id); ok {
		return out, true
	}
	return p.appendJSON(b, id)
}

// maxDirect bounds the members appendDirect sorts on the stack.
const maxDirect = 12

// member is one member of a problem body for appendDirect.
type member struct {
	key  string
	str  string
	num  int64
	kind uint8 // memberString, memberNumber, memberBool (num 0/1)
}

const (
	memberString uint8 = iota
	memberNumber
	memberBool
)

// members collects a body's members on the caller's stack.
type members struct {
	m  [maxDirect]member
	n  int
	ok bool
}

func (l *members) add(m member) {
	if !plainJSON(m.key) {
		l.ok = false
		return
	}
	l.addNamed(m)
}

// addNamed is add for a member whose key is known to be plain JSON.
func (l *members) addNamed(m member) {
	if !l.ok || l.n == len(l.m) || (m.kind == memberString && !plainJSON(m.str)) {
		l.ok = false
		return
	}
	l.m[l.n] = m
	l.n++
}

func (p Problem) appendDirect(b []byte, id string) ([]byte, bool) {
	l := members{ok: true}
	// The fixed members in their sorted order, so that sorting only
	// places the extra ones.
	l.addNamed(member{key: "code", str: p.Code})
	if p.Detail != "" {
		l.addNamed(member{key: "detail", str: p.Detail})
	}
	if id != "" {
		l.addNamed(member{key: "request_id", str: id})
	}
	if p.RetryAfter > 0 {
		l.addNamed(member{key: "retryAfter", num: p.RetryAfter, kind: memberNumber})
	}
	l.addNamed(member{key: "status", num: int64(p.Status), kind: memberNumber})
	l.addNamed(member{key: "title", str: p.Title})
	l.addNamed(member{key: "type", str: p.Type})
	for k, v := range p.Extra {
		if !l.ok {
			break
		}
		switch k {
		case "code", "status", "title", "type", "detail", "retryAfter", "request_id":
			return b, false
		}
		switch v := v.(type) {
		case string:
			l.add(member{key: k, str: v})
		case int:
			l.add(member{key: k, num: int64(v), kind: memberNumber})
		case int64:
			l.add(member{key: k, num: v, kind: memberNumber})
		case int32:
			l.add(member{key: k, num: int64(v), kind: memberNumber})
		case bool:
			m := member{key: k, kind: memberBool}
			if v {
				m.num = 1
			}
			l.add(m)
		default:
			l.ok = false
		}
	}
	if !l.ok {
		return b, false
	}
	ms, n := &l.m, l.n
	// Insertion sort: a handful of members.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && ms[j].key < ms[j-1].key; j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
	b = append(b, '{')
	for i := range n {
		m := &ms[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, m.key...)
		b = append(b, '"', ':')
		switch m.kind {
		case memberString:
			b = append(b, '"')
			b = append(b, m.str...)
			b = append(b, '"')
		case memberNumber:
			b = strconv.AppendInt(b, m.num, 10)
		case memberBool:
			b = strconv.AppendBool(b, m.num != 0)
		}
	}
	return append(b, '}', '\n'), true
}

// plainJSON reports whether encoding/json writes s between quotes as it
// is: printable ASCII without the characters it escapes (including the
// HTML-sensitive ones it escapes by default).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

// plainByte[c] says whether encoding/json writes the byte c of a string
// as it is (plainJSON).
var plainByte = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		switch c {
		case '"', '\\', '<', '>', '&':
		default:
			t[c] = true
		}
	}
	return t
}()

// appendJSON is appendTo through encoding/json.
func (p Problem) appendJSON(b []byte, id string) ([]byte, bool) {
	var out []byte
	var err error
	if len(p.Extra) == 0 {
		ra := p.RetryAfter
		if ra < 0 {
			ra = 0
		}
		out, err = json.Marshal(fixedProblem{
			Code: p.Code, Detail: p.Detail, RequestID: id, RetryAfter: ra,
			Status: p.Status, Title: p.Title, Type: p.Type,
		})
	} else {
		m := make(map[string]any, 6+len(p.Extra))
		for k, v := range p.Extra {
			m[k] = v
		}
		m["type"] = p.Type
		m["status"] = p.Status
		m["code"] = p.Code
		m["title"] = p.Title
		if p.Detail != "" {
			m["detail"] = p.Detail
		}
		if p.RetryAfter > 0 {
			m["retryAfter"] = p.RetryAfter
		}
		if id != "" {
			m["request_id"] = id
		}
		out, err = json.Marshal(m)
	}
	if err != nil {
		// Only fixed, caller-controlled values reach here; a failure means
		// an unsupported Extra value. Fall back to a minimal fixed body.
		return append(b, internalBody...), false
	}
	b = append(b, out...)
	return append(b, '\n'), true
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int64 { return limit.CeilSeconds(d) }

// SetRetryAfter sets the Retry-After header to d rounded up to whole
// seconds (at least 1) and returns the value written.
func SetRetryAfter(h http.Header, d time.Duration) int64 {
	s := RetryAfterSeconds(d)
	h.Set("Retry-After", strconv.FormatInt(s, 10))
	return s
}

// RateLimit describes one rate-limit policy and the client's current
// standing for the IETF RateLimit and RateLimit-Policy header fields
// (draft-ietf-httpapi-ratelimit-headers-10).
type RateLimit struct {
	// Policy names the policy (a short token such as "route", "login",
	// "shield" or a route name; never a client or key).
	Policy string
	// Limit is the quota: units per Window ("q"); 0 discloses no policy
	// (see SetRateLimit).
	Limit int64
	// Window is the policy's time window ("w"), sent in whole seconds (at
	// least 1).
	Window time.Duration
	// Remaining is the units left now ("r"); negative is sent as 0.
	Remaining int64
	// Reset is the time until the quota is fully restored ("t"), sent
	// rounded up to whole seconds; 0 means now.
	Reset time.Duration
}

// SetRateLimitOn is [SetRateLimit] on w's header, the values in w's own
// storage when w lends some ([FieldStore]): for the writers of refusals.
func SetRateLimitOn(w http.ResponseWriter, rl RateLimit) { setRateLimit(w.Header(), w, rl) }

// SetRateLimit sets the RateLimit-Policy and RateLimit fields for rl:
//
//	RateLimit-Policy: "route";q=100;w=60
//	RateLimit: "route";r=0;t=3
//
// A Limit of 0 leaves RateLimit-Policy out: a policy whose size must not
// be disclosed (the shield's: it is the deployment's capacity) sends only
// the client's standing.
func SetRateLimit(h http.Header, rl RateLimit) { setRateLimit(h, nil, rl) }

// setRateLimit is SetRateLimit, its values made by HeaderValues(rw, ...).
func setRateLimit(h http.Header, rw http.ResponseWriter, rl RateLimit) {
	remaining := max(rl.Remaining, 0)
	w := max(int64(rl.Window/time.Second), 1)
	r := int64(0)
	if rl.Reset > 0 {
		r = RetryAfterSeconds(rl.Reset)
	}
	// Both values in one string, both slices in one array: a rejection
	// under a flood sets these on every answer.
	var buf [160]byte
	b := buf[:0]
	if rl.Limit > 0 {
		b = appendPolicy(b, rl.Policy)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, rl.Limit, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, w, 10)
	}
	split := len(b)
	b = appendPolicy(b, rl.Policy)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, r, 10)
	s, vals := HeaderValues(rw, b, 2)
	if rl.Limit > 0 {
		vals[0] = s[:split]
		h["Ratelimit-Policy"] = vals[0:1:1]
	}
	vals[1] = s[split:]
	h["Ratelimit"] = vals[1:2:2]
}

// appendPolicy appends a policy name as a structured-field string. Names
// are configuration words; a character a string cannot carry is replaced.
func appendPolicy(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
