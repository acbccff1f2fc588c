// Package conf is the vocabulary every layer's configuration shares, so
// that a setting's bounds are checked once, by the layer that owns it,
// and the error still names the key the operator wrote.
//
// A layer's configuration type carries its YAML shape (a `yaml:"key"`
// tag on each setting, `yaml:"-"` on what is not a setting: a clock, a
// store, a hook) and a Validate method that collects every invalid
// setting with a [Check]:
//
//	func (c Config) Validate() error {
//		var f conf.Check
//		f.Kind = ErrInvalidConfig
//		f.Int("max_keys", int64(c.MaxKeys), 1, MaxCapacity)
//		f.Duration("window", c.Window, MinWindow, MaxWindow)
//		return f.Err()
//	}
//
// The error is an [Errors] whose paths are the YAML keys relative to the
// value validated; a caller that nests the value under a key of its own
// adds the prefix with [Check.Sub]. The gateway maps the full path to the
// line of its configuration file, so one Validate serves a Go caller
// ("login: invalid configuration: window: 0s out of range [1s, 24h]") and
// an operator ("bulwark.yaml:12: routes[0].login.window: 0s out of range
// [1s, 24h]") alike.
//
// Validate checks the values as they are: a zero is out of range where
// the range excludes it. Types whose zero fields mean "the default" say
// so and fill them in a WithDefaults method, which their constructor
// applies before Validate.
package conf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// FieldError is one invalid setting. Path is the key path relative to
// the value whose Validate returned it ("qps", "timeouts.total",
// "targets[2]", or "" for the value itself); Msg says what is wrong and,
// for a number, the allowed range.
type FieldError struct {
	Path string
	Msg  string
	// Kind is the package's sentinel (such as login.ErrInvalidConfig),
	// for errors.Is; nil when the package has none.
	Kind error
}

// Error renders the error as "kind: path: msg", leaving out what is
// empty.
func (e *FieldError) Error() string {
	s := e.Msg
	if e.Path != "" {
		s = e.Path + ": " + s
	}
	if e.Kind != nil {
		s = e.Kind.Error() + ": " + s
	}
	return s
}

// Unwrap returns Kind.
func (e *FieldError) Unwrap() error { return e.Kind }

// Errors is the error of a Validate method: every invalid setting, in
// the order of the keys, not only the first.
type Errors []*FieldError

// Error joins the errors with "; ", naming the kind once.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString("; ")
		}
		if i == 0 || e.Kind != es[0].Kind {
			b.WriteString(e.Error())
			continue
		}
		c := *e
		c.Kind = nil
		b.WriteString(c.Error())
	}
	return b.String()
}

// Unwrap returns the errors, so that errors.Is finds any of their kinds.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Check collects the invalid settings of one Validate call. The zero
// value is ready to use.
type Check struct {
	// Kind is set on every error added, unless Sub finds one set
	// already.
	Kind error
	list Errors
}

// Add records that the setting at path is invalid; the message is
// formatted as by fmt.Sprintf.
func (c *Check) Add(path, format string, args ...any) {
	c.list = append(c.list, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Kind: c.Kind})
}

// Int records an error unless lo <= v <= hi.
func (c *Check) Int(path string, v, lo, hi int64) {
	if v < lo || v > hi {
		c.Add(path, "%d out of range [%d, %d]", v, lo, hi)
	}
}

// Duration records an error unless lo <= v <= hi.
func (c *Check) Duration(path string, v, lo, hi time.Duration) {
	if v < lo || v > hi {
		c.Add(path, "%s out of range [%s, %s]", FormatDuration(v), FormatDuration(lo), FormatDuration(hi))
	}
}

// Float records an error unless lo <= v <= hi (NaN never is).
func (c *Check) Float(path string, v, lo, hi float64) {
	if !(v >= lo && v <= hi) {
		c.Add(path, "%s out of range [%s, %s]", FormatFloat(v), FormatFloat(lo), FormatFloat(hi))
	}
}

// WholeMillis records an error if d has a part below a millisecond.
func (c *Check) WholeMillis(path string, d time.Duration) {
	if d%time.Millisecond != 0 {
		c.Add(path, "%s is not a whole number of milliseconds", d)
	}
}

// OneOf records an error unless v is one of allowed, listing them.
func (c *Check) OneOf(path, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	c.Add(path, "%q: want %s", v, Alternatives(allowed))
}

// Sub adds the errors of a nested value's Validate under prefix: each
// FieldError keeps its message and kind, and any other error becomes one
// at prefix.
func (c *Check) Sub(prefix string, err error) {
	if err == nil {
		return
	}
	var es Errors
	if errors.As(err, &es) {
		for _, e := range es {
			kind := e.Kind
			if kind == nil {
				kind = c.Kind
			}
			c.list = append(c.list, &FieldError{Path: Join(prefix, e.Path), Msg: e.Msg, Kind: kind})
		}
		return
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		c.list = append(c.list, &FieldError{Path: Join(prefix, fe.Path), Msg: fe.Msg, Kind: fe.Kind})
		return
	}
	c.list = append(c.list, &FieldError{Path: prefix, Msg: err.Error(), Kind: c.Kind})
}

// OK reports whether nothing was recorded.
func (c *Check) OK() bool { return len(c.list) == 0 }

// List returns what was recorded.
func (c *Check) List() Errors { return c.list }

// Err returns the recorded errors as an Errors, or nil.
func (c *Check) Err() error {
	if len(c.list) == 0 {
		return nil
	}
	return c.list
}

// Join appends key to path: "a" + "b" is "a.b", "a" + "[1]" is "a[1]",
// and an empty side leaves the other.
func Join(path, key string) string {
	switch {
	case path == "":
		return key
	case key == "":
		return path
	case key[0] == '[':
		return path + key
	}
	return path + "." + key
}

// Index returns the path of a list's i-th element: "targets" and 2 give
// "targets[2]".
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// FormatDuration prints d compactly: 1m rather than 1m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// FormatFloat prints f in the shortest decimal form, without exponent.
func FormatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// Alternatives lists words as "a", "a or b", "a, b or c".
func Alternatives(words []string) string {
	switch len(words) {
	case 0:
		return "nothing"
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// HostPort checks a listener address: host:port, the host an IP address,
// a lower-case DNS name ([Hostname]) or empty (every interface), the port
// 0 to 65535. The error says which part is wrong.
func HostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port")
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil && !Hostname(host) {
			return errors.New("bad host")
		}
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return errors.New("bad port")
	}
	return nil
}

// Hostname reports whether s is a lower-case DNS name: 1 to 253 bytes of
// a-z, 0-9, "-" and ".".
func Hostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// MaxNameBytes bounds a [Name].
const MaxNameBytes = 64

// Name reports whether s is a plain name, 1 to MaxNameBytes of a-z, 0-9,
// ".", "_" and "-": the names of upstreams, routes and quota operations
// become metric label values and log fields, so they are short and
// plain.
func Name(s string) bool {
	if s == "" || len(s) > MaxNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Name records an error unless v is a [Name].
func (c *Check) Name(path, v string) {
	if !Name(v) {
		c.Add(path, "%q: want 1 to %d of a-z 0-9 . _ -", v, MaxNameBytes)
	}
}

// RedactURL is s fit to echo in an error: without the user info of a
// URL, and cut after 200 bytes.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = nil
		s = u.String()
	}
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
