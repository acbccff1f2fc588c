// Package route matches requests to route patterns on their canonical
// identity, so that a protected route's policy applies to every spelling
// of a request that reaches the same handler.
//
// A [Pattern]'s Path uses net/http.ServeMux's pattern syntax ("/login",
// "/api/", "/items/{id}", "/files/{path...}", "/{$}"), but it is matched
// against the canonical form of the request (package canon): decoded,
// dot segments resolved, ";" parameters dropped, empty segments removed.
// By default literal segments compare case-insensitively and a trailing
// slash is ignored ("/login" matches "/LOGIN" and "/login/"; "/api/"
// matches "/api"), because that is how Express and many other frameworks
// route: a protected route's policies must apply to every spelling that
// reaches the same handler. [Pattern.CaseSensitive] and
// [Pattern.StrictSlash] restore exact matching for one pattern. Methods
// compare case-insensitively, and a GET pattern also serves HEAD.
// [Pattern.Host] is compared with the canonical host (lower-case, no
// port, no trailing dot, see [canon.Host]).
//
// Two spellings frameworks route to one handler are also matched by
// default: a final ".format" ("/login.json" is "/login" for Rails and
// Spring's legacy suffix matching; [Pattern.StrictFormat] opts out), and
// a PHP front controller's path info or routing query
// ("/index.php/login", "/index.php?route=/login", "/?r=login" are
// "/login"; see [FrontControllers], [canon.Script] and
// [canon.QueryRoute]; [Pattern.StrictFrontController] opts out).
//
// When several patterns match, the most specific one wins: the one whose
// requests are a strict subset of the other's (ServeMux's rule, including
// its exception that a pattern with a host beats one without). Two
// patterns that match some request in common where neither is more
// specific collide, and so do two patterns that are one route through a
// framework's equivalence ("/login" and "/login.json"): [Compile] reports
// them as [Collisions], so at run time the first matching pattern in a
// precomputed order is always the most specific one, whatever the order
// the patterns were given in. [Matcher.Lookup] does not allocate.
//
// Matching says which pattern a request belongs to; it does not decide
// what to do with encodings frameworks disagree on (an encoded "/", a
// backslash): [Match.Flags] reports them (canon.Ambiguous), and a caller
// refuses such a request unless its pattern opts in.
package route

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bulwarkhq/bulwark/canon"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/internal/fieldname"
)

// Pattern is one route's match: a path pattern and the switches of its
// matching. The zero value of each switch is the lenient default. Its
// yaml tags are the keys of a gateway route's match section.
type Pattern struct {
	// Name names the pattern in errors; "" names it by its Path.
	Name string `yaml:"-"`
	// Path (path, required) is the path pattern, in net/http.ServeMux
	// syntax, written decoded (no %-escapes, ';', '\', spaces, '?' or
	// '#') and without "//", "." or ".." segments.
	Path string `yaml:"path"`
	// Methods (methods), if not empty, are the only methods the pattern
	// matches (case-insensitively; GET also matches HEAD): at most
	// MaxMethods, each an upper-case token of at most MaxMethodBytes.
	Methods []string `yaml:"methods"`
	// Host (host), if not "", is the only host the pattern matches,
	// compared after canon.Host on both sides; written lower-case,
	// without a port.
	Host string `yaml:"host"`
	// CaseSensitive (case_sensitive) compares literal segments exactly
	// instead of with Unicode case folding.
	CaseSensitive bool `yaml:"case_sensitive"`
	// StrictSlash (strict_slash) makes the trailing slash significant:
	// "/a" no longer matches "/a/", nor "/a/" (or "/a/{p...}") "/a".
	StrictSlash bool `yaml:"strict_slash"`
	// StrictFormat (strict_format) stops a final literal "x" from also
	// matching "x.<format>" (Rails routes "/login.json" to the "/login"
	// action, and Spring's legacy suffix pattern matching "/login.*"
	// alike).
	StrictFormat bool `yaml:"strict_format"`
	// StrictFrontController (strict_front_controller) matches the
	// pattern on the request's own path only, not on the path a PHP front
	// controller routes to ("/index.php/login",
	// "/index.php?route=/login"; see FrontControllers); only such a
	// pattern may name a front controller script.
	StrictFrontController bool `yaml:"strict_front_controller"`
}

// Bounds of [Pattern.Methods].
const (
	MaxMethods     = 16
	MaxMethodBytes = 64
)

// ErrInvalidPattern is the kind of every error [Pattern.Validate]
// returns.
var ErrInvalidPattern = errors.New("route: invalid pattern")

// Validate checks p as written, by key: the path pattern (ServeMux
// syntax, as [Compile] parses it), the methods and the host. It returns
// nil or a [conf.Errors] of kind ErrInvalidPattern. Collisions between
// patterns are [Compile]'s to find.
func (p Pattern) Validate() error {
	f := conf.Check{Kind: ErrInvalidPattern}
	switch {
	case p.Path == "":
		f.Add("path", "required")
	case strings.ContainsAny(p.Path, " \t"):
		f.Add("path", "%q: no spaces (put methods in match.methods and the host in match.host)", p.Path)
	default:
		if _, err := compileMatch(0, p); err != nil {
			f.Add("path", "%q: %v", p.Path, err)
		}
	}
	if len(p.Methods) > MaxMethods {
		f.Add("methods", "%d methods, at most %d", len(p.Methods), MaxMethods)
	}
	seen := make(map[string]bool, len(p.Methods))
	for i, m := range p.Methods {
		mp := fmt.Sprintf("methods[%d]", i)
		switch {
		case len(m) > MaxMethodBytes || !fieldname.Token(m) || strings.ToUpper(m) != m:
			f.Add(mp, "%q: want an upper-case method such as GET", m)
		case seen[m]:
			f.Add(mp, "duplicate method %q", m)
		}
		seen[m] = true
	}
	if p.Host != "" && !conf.Hostname(p.Host) {
		f.Add("host", "%q: want a lower-case host name without port", p.Host)
	}
	return f.Err()
}

// name is how errors name p.
func (p Pattern) name() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Path
}

// FrontControllers names the PHP front controllers and routing query
// parameters matching sees through: a PHP application routes
// "/index.php/login" (path info after the script: Symfony, Laravel,
// CodeIgniter, CakePHP, Slim, Laminas) and "/index.php?route=/login" or
// "/?r=site/login" (a routing parameter: OpenCart, Yii, Drupal 7,
// WordPress; "?/login": CodeIgniter) to its "/login" handler, so a
// pattern "/login" covers them unless it sets StrictFrontController (see
// [canon.Script] and [canon.QueryRoute]). The zero value turns the
// equivalence off. It is the gateway's front_controllers section.
type FrontControllers struct {
	// Scripts are the script names (a path segment, compared
	// case-insensitively); empty turns the equivalence off. At most
	// canon.MaxScripts, each 1 to 64 bytes without '/', '\', '%', ';',
	// '?', '#', braces or spaces.
	Scripts []string `yaml:"scripts"`
	// QueryParams are the query parameters that carry the route to a
	// script or to "/". At most canon.MaxQueryParams, each 1 to 64 bytes
	// without '&', '=', '%', '+', brackets, dots or spaces.
	QueryParams []string `yaml:"query_params"`
}

// ErrInvalidFrontControllers is the kind of every error of
// [FrontControllers.Validate].
var ErrInvalidFrontControllers = errors.New("route: invalid front controllers")

// Validate checks the script names (a path segment each) and the
// parameter names, their counts and repeats (letter case ignored). Every
// problem is a *conf.FieldError of kind ErrInvalidFrontControllers,
// named by its key.
func (fc FrontControllers) Validate() error {
	f := conf.Check{Kind: ErrInvalidFrontControllers}
	check := func(key string, names []string, max int, ok func(string) bool, want string) {
		if len(names) > max {
			f.Add(key, "%d entries, at most %d", len(names), max)
		}
		for i, n := range names {
			p := conf.Index(key, i)
			if !ok(n) {
				f.Add(p, "%q: want %s", n, want)
				continue
			}
			for j := 0; j < i; j++ {
				if strings.EqualFold(names[j], n) {
					f.Add(p, "%q repeats %s[%d]", n, key, j)
					break
				}
			}
		}
	}
	check("scripts", fc.Scripts, canon.MaxScripts, func(n string) bool {
		return n != "" && len(n) <= 64 && n != "." && n != ".." && !strings.ContainsAny(n, "/\\%;?#{} \t")
	}, "a file name such as index.php (1 to 64 bytes, no /, \\, %, ;, ?, #, braces or spaces)")
	check("query_params", fc.QueryParams, canon.MaxQueryParams, func(n string) bool {
		return n != "" && len(n) <= 64 && !strings.ContainsAny(n, "&=%+[] .\t#")
	}, "a parameter name (1 to 64 bytes, no &, =, %, +, brackets, dots or spaces)")
	return f.Err()
}

// DefaultFrontControllers returns Symfony's and Laravel's index.php (and
// most PHP frameworks'), Symfony 2-3's app.php and app_dev.php, and the
// routing query parameters of OpenCart ("route"), Yii ("r"), Drupal 7
// ("q") and WordPress ("rest_route"), in new slices.
func DefaultFrontControllers() FrontControllers {
	return FrontControllers{
		Scripts:     []string{"index.php", "app.php", "app_dev.php"},
		QueryParams: []string{"route", "r", "q", "rest_route"},
	}
}

// PatternError is a pattern that does not parse.
type PatternError struct {
	Index  int    // in the patterns given to Compile
	Name   string // Pattern.Name, or its Path
	Path   string // Pattern.Path
	Reason string // what is wrong, in a phrase
}

// Error names the pattern and says what is wrong with it.
func (e *PatternError) Error() string {
	return fmt.Sprintf("route: pattern %q (%q): %s", e.Name, e.Path, e.Reason)
}

// Compile parses patterns and orders them by precedence. Invalid front
// controllers are the errors of [FrontControllers.Validate]; a pattern
// that does not parse is a *PatternError; patterns that collide are
// [Collisions], every collision listed. Compile compares every pair of
// patterns: its time is quadratic in their number, a bound the caller
// sets.
func Compile(patterns []Pattern, fc FrontControllers) (*Matcher, error) {
	if err := fc.Validate(); err != nil {
		return nil, err
	}
	rules := make([]*matchRule, len(patterns))
	for i, p := range patterns {
		m, err := compileMatch(i, p)
		if err != nil {
			return nil, &PatternError{Index: i, Name: p.name(), Path: p.Path, Reason: err.Error()}
		}
		rules[i] = m
	}
	mt, bad := newMatcher(rules, FrontControllers{
		Scripts:     append([]string(nil), fc.Scripts...),
		QueryParams: append([]string(nil), fc.QueryParams...),
	})
	if len(bad) > 0 {
		return nil, bad
	}
	return mt, nil
}

// tailRule is what a pattern requires of the trailing slash when the
// request has exactly as many segments as the pattern's fixed part.
type tailRule uint8

const (
	tailAny   tailRule = iota // either
	tailNone                  // no trailing slash (strict exact pattern)
	tailSlash                 // trailing slash (strict prefix or {$})
)

// contains reports whether every request allowed by u is allowed by t.
func (t tailRule) contains(u tailRule) bool { return t == tailAny || t == u }

// intersects reports whether some request is allowed by both.
func (t tailRule) intersects(u tailRule) bool { return t == tailAny || u == tailAny || t == u }

// patSeg is one fixed segment of a pattern: a literal or a {name}.
type patSeg struct {
	lit   string
	wild  bool
	ascii bool // lit is all ASCII: folding cannot change its length
}

// matchRule is one pattern, compiled.
type matchRule struct {
	index   int      // in the patterns given to Compile
	name    string   // Pattern.name(), for messages
	host    string   // canonical host; "" matches any
	methods []string // upper-case; nil matches any; GET implies HEAD
	segs    []patSeg // fixed segments
	open    bool     // prefix ("/api/") or remainder ("{p...}"): longer paths match too
	tail    tailRule // trailing-slash rule at len(segs)
	fold    bool     // literal segments compare case-insensitively
	format  bool     // a final literal "x" also matches "x.<format>" (Rails, Spring)
	script  bool     // also matched on the path a PHP front controller routes to
	// scriptSeg is the index of the first segment naming a front
	// controller script (a StrictFrontController pattern only), or -1.
	scriptSeg int
}

// compileMatch parses pattern i.
func compileMatch(i int, p Pattern) (*matchRule, error) {
	m := &matchRule{index: i, name: p.name(), host: canon.Host(p.Host), fold: !p.CaseSensitive,
		format: !p.StrictFormat, script: !p.StrictFrontController, scriptSeg: -1}
	for _, meth := range p.Methods {
		m.methods = append(m.methods, strings.ToUpper(meth))
	}
	path, strict := p.Path, p.StrictSlash
	if path == "" || path[0] != '/' {
		return nil, errors.New("want a path pattern starting with /")
	}
	if strings.ContainsAny(path, "%;\\ \t?#") {
		return nil, errors.New("a pattern is matched against decoded paths: write it without %-escapes, ';', '\\', spaces, '?' or '#'")
	}
	parts := strings.Split(path[1:], "/")
	names := map[string]bool{}
	trailingSlash := strings.HasSuffix(path, "/")
	if trailingSlash {
		parts = parts[:len(parts)-1] // the empty part after the final "/"
	}
	for i, p := range parts {
		last := i == len(parts)-1
		switch {
		case p == "":
			return nil, errors.New("empty segment (\"//\") in pattern")
		case p == "." || p == "..":
			return nil, errors.New("\".\" and \"..\" segments are resolved before matching; write the path without them")
		case p == "{$}":
			if !last || trailingSlash {
				return nil, errors.New("{$} may only end a pattern, after a /")
			}
			m.tail = tailSlash
			if !strict {
				m.tail = tailAny
			}
			return m, nil
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}"):
			w := p[1 : len(p)-1]
			rest := strings.HasSuffix(w, "...")
			w = strings.TrimSuffix(w, "...")
			if !isIdent(w) {
				return nil, fmt.Errorf("bad wildcard %q: want {name} or {name...} with a Go identifier", p)
			}
			if names[w] {
				return nil, fmt.Errorf("duplicate wildcard name %q", w)
			}
			names[w] = true
			if rest {
				if !last || trailingSlash {
					return nil, fmt.Errorf("%q must be the last segment", p)
				}
				m.open = true
				if strict {
					m.tail = tailSlash
				}
				return m, nil
			}
			m.segs = append(m.segs, patSeg{wild: true})
		case strings.ContainsAny(p, "{}"):
			return nil, fmt.Errorf("bad segment %q: a wildcard must be a whole segment", p)
		default:
			m.segs = append(m.segs, patSeg{lit: p, ascii: isASCII(p)})
		}
	}
	if trailingSlash {
		m.open = true
		if strict {
			m.tail = tailSlash
		}
	} else if strict {
		m.tail = tailNone
	}
	return m, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// segEqual compares a pattern literal with a request segment, folding
// case when fold is set. Full Unicode folding (strings.EqualFold) is used
// unless both are ASCII, where a length check and an ASCII loop decide.
func segEqual(fold bool, ps patSeg, seg string, segASCII bool) bool {
	if !fold {
		return ps.lit == seg
	}
	if ps.ascii && segASCII {
		if len(ps.lit) != len(seg) {
			return false
		}
		for i := 0; i < len(seg); i++ {
			a, b := ps.lit[i], seg[i]
			if a == b {
				continue
			}
			if 'A' <= a && a <= 'Z' {
				a += 'a' - 'A'
			}
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			if a != b {
				return false
			}
		}
		return true
	}
	return strings.EqualFold(ps.lit, seg)
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// matchesMethod reports whether the route serves method (upper-case).
func (m *matchRule) matchesMethod(method string) bool {
	if m.methods == nil {
		return true
	}
	for _, x := range m.methods {
		if x == method || x == "GET" && method == "HEAD" {
			return true
		}
	}
	return false
}

// maxSplitSegs is how many segments splitPath records; longer paths are
// matched by walking the string.
const maxSplitSegs = 32

// splitReq is a canonical request path split into segments once, for all
// the rules tried against it.
type splitReq struct {
	path     string
	trailing bool
	n        int // number of segments
	over     bool
	ascii    uint32 // bit i: segment i is all ASCII
	start    [maxSplitSegs]uint32
	end      [maxSplitSegs]uint32
}

func splitPath(p canon.Result, s *splitReq) {
	s.path, s.trailing, s.n, s.over, s.ascii = p.Path, p.Trailing, 0, false, 0
	path := p.Path
	if path == "/" {
		s.trailing = true // the root ends with its slash
		return
	}
	for i := 0; i < len(path); {
		// path[i] == '/'
		j := i + 1
		ascii := true
		for j < len(path) && path[j] != '/' {
			if path[j] >= 0x80 {
				ascii = false
			}
			j++
		}
		if s.n == maxSplitSegs {
			s.over = true
			s.n++
			for j < len(path) {
				if path[j] == '/' {
					s.n++
				}
				j++
			}
			return
		}
		s.start[s.n], s.end[s.n] = uint32(i+1), uint32(j)
		if ascii {
			s.ascii |= 1 << s.n
		}
		s.n++
		i = j
	}
}

// matches reports whether the canonical request (upper-case method,
// canonical host, split canonical path) is served by m. It does not
// allocate.
func (m *matchRule) matches(method, host string, r *splitReq) bool {
	ns := len(m.segs)
	if r.n < ns || !m.open && r.n != ns {
		return false
	}
	if m.host != "" && m.host != host {
		return false
	}
	if !m.matchesMethod(method) {
		return false
	}
	if r.over {
		return m.matchesLong(r)
	}
	// Last fixed segment first: it is usually the one that tells
	// routes with a common prefix apart.
	for i := ns - 1; i >= 0; i-- {
		ps := m.segs[i]
		if ps.wild {
			continue
		}
		seg := r.path[r.start[i]:r.end[i]]
		if !segEqual(m.fold, ps, seg, r.ascii&(1<<i) != 0) {
			// The final segment may carry a format: "login.json".
			if !m.format || i != r.n-1 {
				return false
			}
			base, ok := cutFormat(seg)
			if !ok || !segEqual(m.fold, ps, base, r.ascii&(1<<i) != 0) {
				return false
			}
		}
	}
	if r.n > ns {
		return true // open, checked above
	}
	switch m.tail {
	case tailNone:
		return !r.trailing
	case tailSlash:
		return r.trailing
	}
	return true
}

// cutFormat splits a final segment "name.format" as Rails does
// ("/login(.:format)"; Spring's legacy suffix pattern matching alike):
// the format is what follows the last '.', non-empty, and name is not
// empty.
func cutFormat(seg string) (string, bool) {
	i := strings.LastIndexByte(seg, '.')
	if i <= 0 || i == len(seg)-1 {
		return "", false
	}
	return seg[:i], true
}

// matchesLong is matches for a path of more than maxSplitSegs segments
// (only open rules get here, with their fixed part shorter than that).
func (m *matchRule) matchesLong(r *splitReq) bool {
	path := r.path
	for _, ps := range m.segs {
		end := strings.IndexByte(path[1:], '/') + 1
		seg := path[1:end]
		path = path[end:]
		if ps.wild {
			continue
		}
		if !segEqual(m.fold, ps, seg, isASCII(seg)) {
			return false
		}
	}
	return true
}

// litContains reports whether every segment literal b matches also
// matches literal a's pattern segment.
func (a *matchRule) litContains(x, y patSeg, yFold bool) bool {
	if x.wild {
		return true
	}
	if y.wild {
		return false
	}
	if a.fold {
		return strings.EqualFold(x.lit, y.lit)
	}
	// a compares exactly: y must match exactly one spelling, the same.
	return !yFold && x.lit == y.lit
}

// covers reports whether every request b matches is matched by a.
func (a *matchRule) covers(b *matchRule) bool {
	if a.host != "" && a.host != b.host {
		return false
	}
	if a.methods != nil {
		if b.methods == nil {
			return false
		}
		for _, m := range b.methods {
			if !a.matchesMethod(m) {
				return false
			}
		}
	}
	na, nb := len(a.segs), len(b.segs)
	if a.open {
		if nb < na {
			return false
		}
	} else if b.open || nb != na {
		return false
	}
	for i := 0; i < na; i++ {
		if !a.litContains(a.segs[i], b.segs[i], b.fold) {
			return false
		}
	}
	if nb == na {
		if b.format && !a.format && na > 0 && !a.segs[na-1].wild {
			return false // b also matches "x.<format>", a does not
		}
		if b.script && !a.script {
			return false // b also matches through a front controller
		}
		return a.tail.contains(b.tail)
	}
	if b.script && !a.script {
		return false
	}
	return true // b's requests are longer than a's fixed part; a is open
}

// overlaps reports whether some request is matched by both a and b.
func (a *matchRule) overlaps(b *matchRule) bool {
	if a.host != "" && b.host != "" && a.host != b.host {
		return false
	}
	if a.methods != nil && b.methods != nil {
		common := false
		for _, m := range b.methods {
			if a.matchesMethod(m) || m == "GET" && a.matchesMethod("HEAD") {
				common = true
				break
			}
		}
		if !common {
			return false
		}
	}
	na, nb := len(a.segs), len(b.segs)
	switch {
	case !a.open && !b.open && na != nb:
		return false
	case !a.open && b.open && na < nb, a.open && !b.open && nb < na:
		return false
	}
	for i := 0; i < min(na, nb); i++ {
		x, y := a.segs[i], b.segs[i]
		if x.wild || y.wild {
			continue
		}
		if a.fold || b.fold {
			if !strings.EqualFold(x.lit, y.lit) {
				return false
			}
		} else if x.lit != y.lit {
			return false
		}
	}
	switch {
	case na == nb:
		return a.tail.intersects(b.tail)
	case na < nb:
		// a is open (checked above); a request of nb segments matches a
		// whatever its slash.
		return true
	default:
		return true
	}
}

// moreSpecific reports whether a takes precedence over b for requests
// both match: a matches a strict subset of b's requests, or they would
// collide but a names a host and b does not.
func moreSpecific(a, b *matchRule) bool {
	if b.covers(a) && !a.covers(b) {
		return true
	}
	if a.host != "" && b.host == "" && !a.covers(b) && !b.covers(a) {
		return true
	}
	return false
}

// CollisionKind says why two patterns collide.
type CollisionKind uint8

const (
	// Overlap: both patterns match some request, and neither matches a
	// strict subset of the other's requests ("/{x}/b" and "/a/{y}").
	Overlap CollisionKind = iota
	// Equal: the patterns match exactly the same requests after
	// canonicalization ("/login" and "/LOGIN").
	Equal
	// FormatSuffix: one pattern's final literal is the other's with a
	// ".format" ("/login" and "/login.json"), which Rails and Spring route
	// to one handler.
	FormatSuffix
	// FrontController: one pattern names a front controller script and
	// is, without it, the other ("/login" and "/index.php/login").
	FrontController
	// NamesScript: the pattern names a front controller script but is
	// matched without it (it does not set StrictFrontController), so it
	// would never match. A and B are the same pattern.
	NamesScript
)

// Collision is two patterns [Compile] refuses together: they match some
// request in common with neither more specific than the other, or they
// are one route through a framework's equivalence (Kind says which).
type Collision struct {
	Kind CollisionKind
	// A and B are the patterns' indexes in the patterns given to
	// Compile, A < B (A == B for NamesScript).
	A, B int
	// Script is, for NamesScript, the script's segment as the pattern
	// spells it.
	Script string
	// NameA and NameB name the patterns (Pattern.Name, or the Path).
	NameA, NameB string
}

// Error names both patterns and says what to do about them.
func (c *Collision) Error() string {
	switch c.Kind {
	case NamesScript:
		return fmt.Sprintf("route: pattern %q names the front controller %q, which requests are matched without (\"/%s/login\" is \"/login\"): write the path that follows it, or set StrictFrontController",
			c.NameA, c.Script, c.Script)
	case FormatSuffix:
		return fmt.Sprintf("route: patterns %q and %q are one route for frameworks that read a final \".format\" (Rails, Spring): \"/login.json\" is \"/login\"; remove one, or set StrictFormat on the shorter one",
			c.NameA, c.NameB)
	case FrontController:
		return fmt.Sprintf("route: patterns %q and %q are one route behind a PHP front controller (\"/index.php/login\" is \"/login\"); remove one",
			c.NameA, c.NameB)
	case Equal:
		return fmt.Sprintf("route: patterns %q and %q match exactly the same requests (after canonicalization: letter case, trailing slash, method)", c.NameA, c.NameB)
	}
	return fmt.Sprintf("route: patterns %q and %q both match some requests and neither is more specific", c.NameA, c.NameB)
}

// Collisions are every collision of a set of patterns, in the order of
// the patterns. errors.As finds a *Collision in it too.
type Collisions []*Collision

// Error is the first collision's, with how many more there are.
func (cs Collisions) Error() string {
	if len(cs) == 1 {
		return cs[0].Error()
	}
	return fmt.Sprintf("%v (and %d more)", cs[0], len(cs)-1)
}

// Unwrap returns the collisions, for errors.Is and errors.As.
func (cs Collisions) Unwrap() []error {
	errs := make([]error, len(cs))
	for i, c := range cs {
		errs[i] = c
	}
	return errs
}

// collision is the Collision of a and b.
func collision(k CollisionKind, a, b *matchRule) *Collision {
	return &Collision{Kind: k, A: a.index, B: b.index, NameA: a.name, NameB: b.name}
}

// withoutSeg returns a copy of m without its fixed segment i.
func (m *matchRule) withoutSeg(i int) *matchRule {
	c := *m
	c.segs = append(append([]patSeg(nil), m.segs[:i]...), m.segs[i+1:]...)
	c.scriptSeg = -1
	return &c
}

// formatCollision reports whether b's final literal is "x.<format>"
// where a's is "x", a folding the format, both patterns otherwise
// overlapping: a framework routes b's path to a's handler, so b would
// take a's requests away from its policies.
func formatCollision(a, b *matchRule) bool {
	n := len(a.segs)
	if !a.format || n == 0 || len(b.segs) != n || a.segs[n-1].wild || b.segs[n-1].wild {
		return false
	}
	base, ok := cutFormat(b.segs[n-1].lit)
	if !ok {
		return false
	}
	c := *b
	c.segs = append([]patSeg(nil), b.segs...)
	c.segs[n-1] = patSeg{lit: base, ascii: isASCII(base)}
	return a.overlaps(&c)
}

// scriptCollision reports whether b (a pattern matched without the front
// controller equivalence whose path names a script) is, without its
// script, a pattern a matches through the equivalence, and a is not
// plainly broader: the two patterns would claim one request identity.
func scriptCollision(a, b *matchRule) bool {
	if !a.script || b.scriptSeg < 0 {
		return false
	}
	c := b.withoutSeg(b.scriptSeg)
	c.script = a.script // compared as the same kind of route
	return a.overlaps(c) && !(a.covers(c) && !c.covers(a))
}

// scriptSegment returns the index of the first fixed segment of m naming
// one of scripts, or -1.
func (m *matchRule) scriptSegment(scripts []string) int {
	for i, ps := range m.segs {
		for _, s := range scripts {
			if !ps.wild && strings.EqualFold(ps.lit, s) {
				return i
			}
		}
	}
	return -1
}

// Matcher finds the most specific pattern of a canonical request. It is
// safe for concurrent use.
type Matcher struct {
	rules   []*matchRule // ordered: a rule precedes every rule it is more specific than
	fc      FrontControllers
	scripts bool // some rule folds front controllers
}

// newMatcher orders rules by precedence. It returns every collision; a
// matcher is only built when there is none.
func newMatcher(rules []*matchRule, fc FrontControllers) (*Matcher, Collisions) {
	var bad Collisions
	n := len(rules)
	mt := &Matcher{fc: fc}
	for _, r := range rules {
		r.scriptSeg = r.scriptSegment(fc.Scripts)
		switch {
		case r.script && r.scriptSeg >= 0:
			c := collision(NamesScript, r, r)
			c.Script = r.segs[r.scriptSeg].lit
			bad = append(bad, c)
		case r.script:
			mt.scripts = true
		}
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := rules[i], rules[j]
			switch {
			case formatCollision(a, b), formatCollision(b, a):
				bad = append(bad, collision(FormatSuffix, a, b))
				continue
			case scriptCollision(a, b), scriptCollision(b, a):
				bad = append(bad, collision(FrontController, a, b))
				continue
			}
		}
	}
	// after[i] lists the rules that must come after i.
	after := make([][]int, n)
	indeg := make([]int, n)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := rules[i], rules[j]
			if !a.overlaps(b) {
				continue
			}
			switch {
			case moreSpecific(a, b):
				after[i] = append(after[i], j)
				indeg[j]++
			case moreSpecific(b, a):
				after[j] = append(after[j], i)
				indeg[i]++
			case a.covers(b) && b.covers(a):
				bad = append(bad, collision(Equal, a, b))
			default:
				bad = append(bad, collision(Overlap, a, b))
			}
		}
	}
	if len(bad) > 0 {
		return nil, bad
	}
	// Kahn's algorithm, stable on the configuration order.
	order := make([]*matchRule, 0, n)
	done := make([]bool, n)
	for len(order) < n {
		progressed := false
		for i := 0; i < n; i++ {
			if !done[i] && indeg[i] == 0 {
				done[i] = true
				order = append(order, rules[i])
				for _, j := range after[i] {
					indeg[j]--
				}
				progressed = true
				break
			}
		}
		if !progressed {
			// "More specific" is a strict partial order, so this cannot
			// happen; fail loudly rather than serve a wrong precedence.
			panic("route: precedence has a cycle")
		}
	}
	mt.rules = order
	return mt, nil
}

// Match is the outcome of [Matcher.Lookup].
type Match struct {
	// Index is the most specific matching pattern's index in the
	// patterns given to Compile, or -1 when no pattern matches.
	Index int
	// Flags are the flags of the request's canonical path and, when the
	// pattern matched the path a PHP front controller routes the
	// request to, of that path too. A caller refuses a request with
	// canon.Ambiguous among them (an encoded "/", a backslash), unless
	// its pattern opts in: frameworks disagree on what such a path is.
	Flags canon.Flag
}

// Lookup returns the most specific pattern matching a request: its
// method in upper case (strings.ToUpper does not allocate for a method
// already upper-case), its canonical host ([canon.Host]), its canonical
// path ([canon.Path] of the path the upstream will see) and its raw query
// string (without the '?'; "" if none). It does not allocate, except for
// a request naming a front controller script or routing query.
//
// A request through a front controller ("/index.php/login",
// "/index.php?route=/login", "/?r=/login") goes to the most specific
// pattern that matches the path the framework routes to, among the
// patterns without StrictFrontController, unless the request's own path
// is matched by a pattern naming the script itself. A routing query that
// names two different paths is ambiguous: the error is
// canon.ErrInvalidPath, and the request is refused.
func (mt *Matcher) Lookup(method, host string, p canon.Result, query string) (Match, error) {
	var s splitReq
	splitPath(p, &s)
	raw := mt.first(method, host, &s, false)
	if !mt.scripts {
		return matchOf(raw, p.Flags), nil
	}
	fp, found, last := canon.Script(p, mt.fc.Scripts)
	if query != "" && (last || p.Path == "/") {
		qp, ok, err := canon.QueryRoute(query, mt.fc.QueryParams)
		if err != nil {
			return Match{Index: -1, Flags: p.Flags}, err
		}
		if ok {
			prefix := fp.Path
			if prefix == "/" {
				prefix = ""
			}
			fp = canon.Result{Path: prefix + qp.Path, Trailing: qp.Trailing, Flags: fp.Flags | qp.Flags}
			if qp.Path == "/" && prefix != "" {
				fp.Path = prefix
			}
			found = true
		}
	}
	if !found || raw != nil && raw.scriptSeg >= 0 {
		return matchOf(raw, p.Flags), nil
	}
	var fs splitReq
	splitPath(fp, &fs)
	if r := mt.first(method, host, &fs, true); r != nil {
		return matchOf(r, p.Flags|fp.Flags), nil
	}
	return matchOf(raw, p.Flags), nil
}

// matchOf is the Match of rule r (nil: none).
func matchOf(r *matchRule, flags canon.Flag) Match {
	if r == nil {
		return Match{Index: -1, Flags: flags}
	}
	return Match{Index: r.index, Flags: flags}
}

// first returns the first rule in precedence order matching s; with
// scripts, only among the rules that fold front controllers.
func (mt *Matcher) first(method, host string, s *splitReq, scripts bool) *matchRule {
	for _, r := range mt.rules {
		if scripts && !r.script {
			continue
		}
		if r.matches(method, host, s) {
			return r
		}
	}
	return nil
}
