package gateway

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Limits on the configuration document itself, so a hostile or broken file
// cannot make the loader (or `bulwark check`) use unbounded memory or time.
const (
	// MaxConfigBytes is the largest configuration file accepted.
	MaxConfigBytes = 1 << 20
	// maxNodes bounds the YAML nodes the schema walk visits, aliases
	// expanded (every visit of an aliased node counts again). The walk
	// only descends where the schema does, and yaml.v3's strict decoding
	// visits no more than the walk did, so this bounds decoding too:
	// "billion laughs" documents stop here.
	maxNodes = 100_000
	// maxProblems bounds the problems one load reports.
	maxProblems = 200
)

// Problem is one thing wrong with a configuration: where it is (file,
// line, key path) and what is wrong, including the allowed range for
// numeric settings.
type Problem struct {
	// File is the configuration file name, or "" for problems in the
	// process environment and in a Config built in Go.
	File string
	// Line is the 1-based line of the offending key, or 0 when unknown.
	Line int
	// Path is the key path, e.g. "routes[0].rate_limit.qps", or the name
	// of an environment variable.
	Path string
	// Msg says what is wrong.
	Msg string
}

// String renders the problem as "file:line: path: msg" ("environment:
// VAR: msg" for the environment).
func (p Problem) String() string {
	var b strings.Builder
	switch {
	case p.File != "" && p.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", p.File, p.Line)
	case p.File != "":
		b.WriteString(p.File + ": ")
	case isEnvName(p.Path):
		b.WriteString("environment: ")
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// isEnvName reports whether path names an environment variable rather
// than a configuration key.
func isEnvName(path string) bool {
	if path == "" {
		return false
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ConfigError is returned when a configuration is invalid. It lists every
// problem found, not only the first.
type ConfigError struct {
	Problems []Problem
}

// Error joins the problems, one per line.
func (e *ConfigError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// document is a decoded configuration file: the Config (defaults applied),
// the problems found on the way, and what later steps need to know.
type document struct {
	cfg      *Config
	problems []Problem
	// fatal: the document could not be decoded at all (syntax, size);
	// nothing later should look at cfg.
	fatal bool
	// poisoned are the key paths whose values the walk threw away;
	// validation problems at or under them are knock-on effects and are
	// not reported.
	poisoned []string
	// nodes is how many nodes the walk visited, aliases expanded.
	nodes int
}

// decodeDocument parses data, walks it against the schema and decodes it
// with yaml.v3 into a Config with defaults. It never stops at the first
// problem: a bad value is reported and left out (so its key takes its
// default) and the rest is decoded, so that validation can report its
// problems too.
func decodeDocument(name string, data []byte) *document {
	doc := &document{cfg: &Config{}}
	w := &walker{file: name, lines: map[string]int{}}
	defer func() {
		doc.problems = w.problems
		doc.poisoned = w.poisoned
		doc.nodes = w.nodes
		doc.cfg.lines = w.lines
		doc.cfg.File = name
	}()
	if len(data) > MaxConfigBytes {
		w.add(0, "", "larger than %d bytes", MaxConfigBytes)
		doc.fatal = true
		return doc
	}

	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			fillDefaults(doc.cfg, w.lines) // empty document: defaults only
			return doc
		}
		w.add(yamlErrLine(err), "", "%s", yamlErrMsg(err))
		doc.fatal = true
		return doc
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		w.add(extra.Line, "", "more than one YAML document (one file holds one configuration)")
	case !errors.Is(err, io.EOF):
		w.add(yamlErrLine(err), "", "more than one YAML document (one file holds one configuration)")
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		fillDefaults(doc.cfg, w.lines)
		return doc
	}
	top := root.Content[0]
	w.lines[""] = top.Line
	if !w.walk(top, configType, "") || w.aborted {
		doc.fatal = true
		return doc
	}

	var err error
	if len(w.problems) == 0 {
		// The normal case: yaml.v3's strict mode on the file as written.
		// The walk found nothing, so this cannot fail; if it ever does,
		// the walk has a gap and the problem is still reported.
		strict := yaml.NewDecoder(bytes.NewReader(data))
		strict.KnownFields(true)
		err = strict.Decode(doc.cfg)
	} else {
		// The walk removed what it reported (unknown and duplicate keys,
		// bad values), so decoding the rest lets validation go on.
		err = root.Decode(doc.cfg)
	}
	if err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, m := range te.Errors {
				w.add(yamlErrLine(errors.New(m)), "", "cannot decode: %s", stripLine(m))
			}
		} else {
			w.add(yamlErrLine(err), "", "cannot decode: %s", stripLine(strings.TrimPrefix(err.Error(), "yaml: ")))
		}
		doc.fatal = true
		return doc
	}
	fillDefaults(doc.cfg, w.lines)
	return doc
}

// walker checks a parsed document against the configuration schema: the
// yaml tags and Go types of Config and what it contains. It records the
// line of every key path, reports every problem with its path, and
// removes what it reported from the tree. It never sets a value: yaml.v3
// decodes afterwards.
type walker struct {
	file     string
	problems []Problem
	lines    map[string]int
	poisoned []string
	nodes    int
	aborted  bool
}

func (w *walker) add(line int, path, format string, args ...any) {
	if len(w.problems) >= maxProblems {
		return
	}
	w.problems = append(w.problems, Problem{File: w.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// count charges one node visit and reports false once the bound is
// exceeded; the walk then stops.
func (w *walker) count(n *yaml.Node, path string) bool {
	if w.aborted {
		return false
	}
	w.nodes++
	if w.nodes > maxNodes {
		w.aborted = true
		w.add(n.Line, path, "document too large: more than %d nodes (aliases expanded)", maxNodes)
		return false
	}
	return true
}

var (
	configType    = reflect.TypeFor[Config]()
	durationType  = reflect.TypeFor[time.Duration]()
	listEntryType = reflect.TypeFor[ipset.StaticEntry]()
	textType      = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// isText reports whether a setting of type t is one scalar that t
// decodes itself: *t implements encoding.TextUnmarshaler (netip.Prefix,
// a URL type, a number with a unit...) and t is not a struct with keys
// (such a struct is a mapping whose UnmarshalText reads a short form,
// as ipset.StaticEntry).
func isText(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer || t == durationType || !reflect.PointerTo(t).Implements(textType) {
		return false
	}
	if t.Kind() == reflect.Struct {
		for i := range t.NumField() {
			if _, tagged := t.Field(i).Tag.Lookup("yaml"); tagged {
				return false
			}
		}
	}
	return true
}

// walk checks n against type t at path and reports whether the value is
// usable; when it is not, a problem was reported and the caller removes
// the value.
func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) bool {
	if !w.count(n, path) {
		return false
	}
	if n.Kind == yaml.AliasNode {
		// Aliases are expanded (and counted again). The walk descends
		// only where the schema does, and the schema has no recursive
		// type, so even an alias to a value that contains it ends at a
		// kind mismatch: the depth is the schema's, whatever the aliases.
		if n.Alias == nil {
			w.add(n.Line, path, "bad alias")
			return false
		}
		return w.walk(n.Alias, t, path)
	}
	null := isNull(n)
	if t.Kind() == reflect.Pointer {
		if null {
			return true // an optional section left off
		}
		t = t.Elem()
	}
	switch {
	case isText(t):
		// yaml.v3 hands the scalar's text to UnmarshalText; the walk
		// does the same first, so that its error has the key and line.
		if n.Kind != yaml.ScalarNode || null || n.ShortTag() == "!!binary" {
			w.add(n.Line, path, "want a string, got %s", kindName(n))
			return false
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
			w.add(n.Line, path, "%s", err)
			return false
		}
		return true
	case t == durationType:
		if n.Kind != yaml.ScalarNode || null {
			w.add(n.Line, path, "want a duration such as 500ms, 30s or 5m, got %s", kindName(n))
			return false
		}
		if !decodesAs[time.Duration](n) {
			w.add(n.Line, path, "bad duration %q (want e.g. 500ms, 30s, 5m)", n.Value)
			return false
		}
		return true
	case t == listEntryType && n.Kind == yaml.ScalarNode && !null:
		// The short form: the address or prefix alone.
		return w.scalar(n, reflect.TypeFor[string](), path)
	}
	switch t.Kind() {
	case reflect.Struct:
		if null {
			return true // keeps its defaults
		}
		if n.Kind != yaml.MappingNode {
			w.add(n.Line, path, "want %s, got %s", describe(t), kindName(n))
			return false
		}
		w.mapping(n, t, path)
		return true
	case reflect.Slice:
		if null {
			return true
		}
		if n.Kind != yaml.SequenceNode {
			w.add(n.Line, path, "want a list, got %s", kindName(n))
			return false
		}
		w.sequence(n, t.Elem(), path)
		return true
	}
	return w.scalar(n, t, path)
}

// scalar checks a leaf. The rules are stricter than yaml.v3's (no "yes"
// for true, no 1.5 truncated into an integer) and the conversion itself
// is yaml.v3's, so what passes here decodes.
func (w *walker) scalar(n *yaml.Node, t reflect.Type, path string) bool {
	null := isNull(n)
	tag := n.ShortTag()
	switch t.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode || null || tag == "!!binary" {
			w.add(n.Line, path, "want a string, got %s", kindName(n))
			return false
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || tag != "!!bool" {
			w.add(n.Line, path, "want true or false, got %s", kindName(n))
			return false
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.Kind != yaml.ScalarNode || tag != "!!int" {
			w.add(n.Line, path, "want an integer, got %s", kindName(n))
			return false
		}
		if n.Decode(reflect.New(t).Interface()) != nil {
			w.add(n.Line, path, "integer %s out of representable range", n.Value)
			return false
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || tag != "!!int" || n.Decode(reflect.New(t).Interface()) != nil {
			w.add(n.Line, path, "want a whole number from 0 to %d, got %s", uint64(1)<<(t.Bits()-1)*2-1, kindName(n))
			return false
		}
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") {
			w.add(n.Line, path, "want a number, got %s", kindName(n))
			return false
		}
		var f float64
		if n.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			w.add(n.Line, path, "want a finite number, got %s", n.Value)
			return false
		}
	default:
		// A schema type the walk does not know: TestSchema prevents it.
		w.add(n.Line, path, "unsupported setting type %s", t)
		return false
	}
	return true
}

// decodesAs reports whether yaml.v3 decodes the scalar n into a T.
func decodesAs[T any](n *yaml.Node) bool {
	var v T
	return n.Decode(&v) == nil
}

// mapping checks the keys of a mapping decoded into struct type t.
func (w *walker) mapping(n *yaml.Node, t reflect.Type, path string) {
	fields := schemaOf(t)
	seen := make(map[string]int, len(n.Content)/2)
	var drop map[int]bool
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !w.count(k, path) {
			return
		}
		bad := func() {
			if drop == nil {
				drop = map[int]bool{}
			}
			drop[i] = true
		}
		if k.Kind != yaml.ScalarNode {
			w.add(k.Line, path, "keys must be plain strings")
			w.poisoned = append(w.poisoned, path)
			bad()
			continue
		}
		key := k.Value
		kp := conf.Join(path, key)
		if k.ShortTag() == "!!merge" {
			// What it would have merged is missing: what validation
			// says about this mapping is a knock-on effect.
			w.add(k.Line, path, "merge keys (<<) are not supported; write the keys out")
			w.poisoned = append(w.poisoned, path)
			bad()
			continue
		}
		if first, dup := seen[key]; dup {
			w.add(k.Line, kp, "duplicate key (first set at line %d)", first)
			bad()
			continue
		}
		seen[key] = k.Line
		f, ok := fields.byKey[key]
		if !ok {
			if to, moved := movedKeys[kp]; moved {
				w.add(k.Line, kp, "moved to %s", to)
			} else {
				w.add(k.Line, kp, "unknown key (known keys: %s)", strings.Join(fields.keys, ", "))
			}
			bad()
			continue
		}
		w.lines[kp] = k.Line
		if !w.walk(v, f.Type, kp) {
			// Left out, the key takes its default; what validation
			// would say about that is a knock-on effect.
			delete(w.lines, kp)
			w.poisoned = append(w.poisoned, kp)
			bad()
		}
		if w.aborted {
			return
		}
	}
	if drop != nil {
		kept := make([]*yaml.Node, 0, len(n.Content)-2*len(drop))
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !drop[i] {
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = kept
	}
}

// movedKeys names keys of earlier releases and where they live now.
var movedKeys = map[string]string{
	"shield.trusted_proxies": "client_ip.trusted_proxies (it decides the client for every layer)",
}

// sequence checks the items of a list decoded into a slice of et. A bad
// item is replaced by an empty one (yaml.v3 would drop it and shift the
// indices of the rest).
func (w *walker) sequence(n *yaml.Node, et reflect.Type, path string) {
	for i, e := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		w.lines[p] = e.Line
		ok := true
		if isNull(e) {
			// yaml.v3 drops null items; a list has no optional items.
			if !w.count(e, p) {
				return
			}
			w.add(e.Line, p, "want %s, got null", describe(et))
			ok = false
		} else {
			ok = w.walk(e, et, p)
		}
		if w.aborted {
			return
		}
		if !ok {
			n.Content[i] = emptyNode(et)
			w.poisoned = append(w.poisoned, p)
		}
	}
}

// describe names what a list item of type t must be.
func describe(t reflect.Type) string {
	switch {
	case t == listEntryType:
		return "an address, a prefix or a mapping {ip, reason}"
	case isText(t):
		return "a value"
	case t.Kind() == reflect.Struct:
		return "a mapping"
	case t.Kind() == reflect.String:
		return "a string"
	}
	return "a value"
}

// emptyNode is the stand-in for a bad list item of type t.
func emptyNode(t reflect.Type) *yaml.Node {
	if t.Kind() == reflect.Struct {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// structSchema is what the walk needs to know of a struct type: its keys
// in declaration order and the field behind each.
type structSchema struct {
	keys  []string
	byKey map[string]reflect.StructField
}

// schemaOf lists the yaml keys of struct type t: every field with a yaml
// tag other than "-", and the keys of a struct field tagged ",inline" as
// t's own (a section that adds keys to a library's type embeds it). A
// field's Index is its index sequence from t (reflect.Value.FieldByIndex).
func schemaOf(t reflect.Type) structSchema {
	s := structSchema{byKey: map[string]reflect.StructField{}}
	for _, f := range keyFields(t) {
		key := yamlKey(f)
		s.keys = append(s.keys, key)
		s.byKey[key] = f
	}
	return s
}

// keyFields returns the fields of struct type t that are keys, inline
// structs flattened, in declaration order; each field's Index is relative
// to t.
func keyFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	if isText(t) {
		return nil // a scalar, whatever its fields
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if isInline(f) {
			for _, g := range keyFields(f.Type) {
				g.Index = append([]int{i}, g.Index...)
				out = append(out, g)
			}
			continue
		}
		if yamlKey(f) != "" {
			out = append(out, f)
		}
	}
	return out
}

// isInline reports whether f is a struct whose keys are its parent's
// (yaml:",inline").
func isInline(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return f.Type.Kind() == reflect.Struct && strings.Contains(","+opts+",", ",inline,")
}

// yamlKey returns the configuration key of a struct field, or "" for a
// field that is not one.
func yamlKey(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func kindName(n *yaml.Node) string {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		v := n.Value
		if len(v) > 64 {
			v = v[:64] + "…"
		}
		return strconv.Quote(v)
	}
	return "an unsupported node"
}

// fillDefaults gives every field of cfg whose key is absent from lines
// its default: DefaultConfig for the sections, elementDefault for list
// items and optional sections. A key present in the document keeps the
// decoded value, even zero. Then the defaults that depend on other keys
// are derived.
func fillDefaults(cfg *Config, lines map[string]int) {
	fill(reflect.ValueOf(cfg).Elem(), reflect.ValueOf(DefaultConfig()).Elem(), "", lines)
	deriveDefaults(cfg, lines)
}

func fill(v, def reflect.Value, path string, lines map[string]int) {
	if isText(v.Type()) {
		return // a scalar, decoded as a whole
	}
	switch v.Kind() {
	case reflect.Struct:
		fillNonKeys(v, def)
		for _, f := range keyFields(v.Type()) {
			p := conf.Join(path, yamlKey(f))
			fv, dv := v.FieldByIndex(f.Index), def.FieldByIndex(f.Index)
			if _, set := lines[p]; !set {
				// Absent: the default. (A zero default changes
				// nothing, which keeps the short form of a list entry,
				// whose address has no key of its own.)
				if !dv.IsZero() {
					fv.Set(dv)
				}
				continue
			}
			fill(fv, dv, p, lines)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			fill(v.Elem(), elementDefault(v.Type().Elem()), path, lines)
		}
	case reflect.Slice:
		d := elementDefault(v.Type().Elem())
		for i := range v.Len() {
			fill(v.Index(i), d, fmt.Sprintf("%s[%d]", path, i), lines)
		}
	}
}

// fillNonKeys gives the exported fields of struct v that are not keys
// (yaml:"-": a library type's settings the file cannot set) their
// defaults from def, inline sections included.
func fillNonKeys(v, def reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		switch {
		case !f.IsExported():
		case isInline(f):
			fillNonKeys(v.Field(i), def.Field(i))
		case yamlKey(f) == "" && v.Field(i).IsZero():
			v.Field(i).Set(def.Field(i))
		}
	}
}

// elementDefault is the default of a list item or optional section of
// type t: what a key left out of it takes.
func elementDefault(t reflect.Type) reflect.Value {
	var d any
	switch t {
	case reflect.TypeFor[Upstream]():
		d = DefaultUpstream()
	case reflect.TypeFor[ratelimit.Config]():
		d = ratelimit.DefaultConfig()
	case reflect.TypeFor[login.Policy]():
		d = login.DefaultPolicy()
	case reflect.TypeFor[Quota]():
		d = DefaultQuota()
	case listEntryType:
		d = ipset.StaticEntry{Reason: defaultReason}
	default:
		return reflect.Zero(t)
	}
	return reflect.ValueOf(d)
}

// deriveDefaults sets the defaults that depend on other keys: an upstream
// timeout left out never exceeds the upstream's total (a total of 2s with
// the connect default of 5s means connect 2s).
func deriveDefaults(cfg *Config, lines map[string]int) {
	for i := range cfg.Upstreams {
		t := &cfg.Upstreams[i].Timeouts
		p := fmt.Sprintf("upstreams[%d].timeouts.", i)
		for key, f := range map[string]*time.Duration{"connect": &t.Connect, "response_header": &t.ResponseHeader, "per_try": &t.PerTry} {
			if _, set := lines[p+key]; !set && t.Total > 0 {
				*f = min(*f, t.Total)
			}
		}
	}
}

// lineOf returns the line recorded for path, or for its nearest recorded
// parent, or 0.
func lineOf(lines map[string]int, path string) int {
	for {
		if l, ok := lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i <= 0 {
			return lines[""]
		}
		path = path[:i]
	}
}

// yamlErrLine extracts the line from a yaml.v3 error ("yaml: line N: ..."
// or "line N: ..."), or returns 0.
func yamlErrLine(err error) int {
	_, rest, ok := strings.Cut(err.Error(), "line ")
	if !ok {
		return 0
	}
	num, _, _ := strings.Cut(rest, ":")
	l, _ := strconv.Atoi(num)
	return l
}

// stripLine drops a leading "line N: " from a yaml.v3 message.
func stripLine(s string) string {
	if strings.HasPrefix(s, "line ") {
		if _, rest, ok := strings.Cut(s, ": "); ok {
			return rest
		}
	}
	return s
}

func yamlErrMsg(err error) string {
	return "bad YAML: " + stripLine(strings.TrimPrefix(err.Error(), "yaml: "))
}
