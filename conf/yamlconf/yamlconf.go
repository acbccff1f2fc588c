// Package yamlconf decodes YAML configuration files into Go types strictly,
// guided by their `yaml` struct tags, and says what is wrong with a file
// in the file's own terms: "bulwark.yaml:12: routes[0].rate_limit.qps:
// want a number, got "fast"".
//
// A walk over the parsed node tree, following the Go type, comes first:
// it records the line of every key path ([Lines]), reports unknown keys
// (with the keys known there), duplicate keys, merge keys, wrong kinds
// and scalars that would not decode, and removes what it reported, so
// that yaml.v3 can then decode the rest and the caller's validation can
// report its own problems too, with lines. It never stops at the first
// problem. Keys absent from the file take their defaults
// ([Options.Default]); keys present keep the file's value, even zero.
//
// The schema is the Go type: a field with a `yaml:"key"` tag is a key; a
// struct field tagged `yaml:",inline"` adds its keys to its parent's (a
// section that adds keys to a library's type embeds it); an exported
// field tagged `yaml:"-"` is not a key and takes its default. Settings
// are strings, bools, integers of any size, float64, time.Duration
// ("500ms"), types whose pointer implements [encoding.TextUnmarshaler]
// (one scalar, checked by UnmarshalText), structs (mappings), pointers
// to structs (optional mappings: nil when absent or null) and slices of
// these. Types may be recursive. A struct with keys that also implements
// TextUnmarshaler is a mapping with a short form: a plain scalar handed
// to UnmarshalText.
//
// The work is bounded: by [Options.MaxNodes] node visits (aliases count
// each time they are expanded, so "billion laughs" documents stop early),
// by a nesting depth of [MaxDepth] and by [Options.MaxProblems].
package yamlconf

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
	"go.yaml.in/yaml/v3"
)

// MaxDepth bounds the nesting of mappings and lists the walk descends
// into (a recursive type, or an alias to an enclosing node, ends here).
const MaxDepth = 100

// Problem is one thing wrong with a configuration: where it is (file,
// line, key path) and what is wrong, including the allowed range for
// numeric settings.
type Problem struct {
	// File is the configuration file name, or "" for problems in the
	// process environment and in a configuration built in Go.
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
// VAR: msg" for an environment variable: a Path of upper-case letters,
// digits and '_', without File).
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

// Error is returned when a configuration is invalid. It lists every
// problem found, not only the first.
type Error struct {
	Problems []Problem
}

// Error joins the problems, one per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Lines maps key paths ("routes[1].rate_limit.qps", list items as
// "routes[1]", the document itself as "") to the line they were written
// on.
type Lines map[string]int

// Of returns the line of path, or of its nearest recorded parent, or 0.
func (l Lines) Of(path string) int {
	for {
		if n, ok := l[path]; ok {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i <= 0 {
			return l[""]
		}
		path = path[:i]
	}
}

// Options say how to decode one kind of document. The zero value decodes
// strictly without bounds or defaults.
type Options struct {
	// File names the file in problems.
	File string
	// MaxBytes, MaxNodes and MaxProblems bound the document's size, the
	// node visits of the walk (aliases expanded) and the problems
	// reported; 0 is no bound.
	MaxBytes, MaxNodes, MaxProblems int
	// Default returns the default of a value of type t: for the decoded
	// type itself, and for list items and optional sections (pointers to
	// structs) of type t, with which their absent keys are filled. An
	// invalid Value (or nil Default) is t's zero value.
	Default func(t reflect.Type) reflect.Value
	// Moved names keys of earlier formats and where they live now
	// ("shield.trusted_proxies" → "client_ip.trusted_proxies (...)"):
	// such a key is reported as "moved to ...", not as unknown.
	Moved map[string]string
	// Describe says what a value of a type must be, in messages such as
	// "want an address, a prefix or a mapping {ip, reason}, got null"
	// (by default "a mapping", "a string" or "a value").
	Describe map[reflect.Type]string
	// Lenient reads scalars as YAML 1.1 libraries (yaml.v2) do, for
	// formats defined by such a library: yes, no, on and off are
	// booleans, and null is a setting's zero value.
	Lenient bool
	// OneOrList names slice types (of structs) whose value may also be
	// written as one mapping, a list of one item: "listen: {addr: ...}"
	// as well as "listen: [{addr: ...}, ...]". The key paths of the
	// short form have no index ("listen.addr", not "listen[0].addr"):
	// [Document.Short] lists where it was used.
	OneOrList map[reflect.Type]bool
}

// Document is what decoding found besides the value.
type Document struct {
	// Problems lists what is wrong, in the order of the file.
	Problems []Problem
	// Fatal: the document could not be decoded at all (syntax, size, a
	// top-level value of the wrong kind): nothing should look at the
	// value. Otherwise the value holds what was valid, with defaults
	// where a key was absent or reported.
	Fatal bool
	// Lines has the line of every key path decoded.
	Lines Lines
	// Poisoned are the key paths whose values the walk threw away (so
	// they took their defaults): validation problems at or under them
	// are knock-on effects, not worth reporting ([Document.Poisons]).
	Poisoned []string
	// Nodes is how many nodes the walk visited, aliases expanded.
	Nodes int
	// Short lists the key paths of Options.OneOrList lists written as
	// one mapping: their item's keys are recorded without an index.
	Short []string
}

// Poisons reports whether path is one of d.Poisoned or inside one.
func (d *Document) Poisons(path string) bool {
	for _, p := range d.Poisoned {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

// Decode decodes data, one YAML document, into v (a non-nil pointer to a
// struct), strictly, and fills the keys the document leaves out with
// their defaults. An empty document is all defaults; a second document
// is a problem.
func Decode(data []byte, v any, o Options) *Document {
	w := newWalker(o)
	doc := &Document{}
	defer w.finish(doc)
	out := reflect.ValueOf(v).Elem()
	if o.MaxBytes > 0 && len(data) > o.MaxBytes {
		w.add(0, "", "larger than %d bytes", o.MaxBytes)
		doc.Fatal = true
		return doc
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			w.fillDefaults(out) // empty document: defaults only
			return doc
		}
		w.add(errLine(err), "", "%s", errMsg(err))
		doc.Fatal = true
		return doc
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		w.add(extra.Line, "", "more than one YAML document (one file holds one configuration)")
	case !errors.Is(err, io.EOF):
		w.add(errLine(err), "", "more than one YAML document (one file holds one configuration)")
	}
	if len(w.problems) == 0 {
		// The normal case: yaml.v3's strict mode on the file as written.
		// If the walk finds nothing, this cannot fail; if it ever does,
		// the walk has a gap and the problem is still reported.
		w.decode(&root, out, func() error {
			strict := yaml.NewDecoder(bytes.NewReader(data))
			strict.KnownFields(true)
			return strict.Decode(v)
		}, doc)
		return doc
	}
	w.decode(&root, out, nil, doc)
	return doc
}

// DecodeNode is [Decode] for a document (or value) node already parsed,
// such as one document of a stream that holds several.
func DecodeNode(n *yaml.Node, v any, o Options) *Document {
	w := newWalker(o)
	doc := &Document{}
	defer w.finish(doc)
	w.decode(n, reflect.ValueOf(v).Elem(), nil, doc)
	return doc
}

// decode walks n against out's type and decodes it into out: with
// strict if given and the walk found nothing, else with the pruned tree.
func (w *walker) decode(n *yaml.Node, out reflect.Value, strict func() error, doc *Document) {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) != 1 {
			w.fillDefaults(out)
			return
		}
		n = n.Content[0]
	}
	w.lines[""] = n.Line
	if !w.walk(n, out.Type(), "", 0) || w.aborted {
		doc.Fatal = true
		return
	}
	var err error
	if strict != nil && len(w.problems) == 0 && !w.rewrote {
		err = strict()
	} else {
		// The walk removed what it reported (unknown and duplicate keys,
		// bad values), so decoding the rest lets validation go on.
		err = n.Decode(out.Addr().Interface())
	}
	if err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, m := range te.Errors {
				w.add(errLine(errors.New(m)), "", "cannot decode: %s", stripLine(m))
			}
		} else {
			w.add(errLine(err), "", "cannot decode: %s", stripLine(strings.TrimPrefix(err.Error(), "yaml: ")))
		}
		doc.Fatal = true
		return
	}
	w.fillDefaults(out)
}

// walker checks a parsed document against the schema: the yaml tags and
// Go types of the decoded type and what it contains. It records the line
// of every key path, reports every problem with its path, and removes
// what it reported from the tree. It never sets a value: yaml.v3 decodes
// afterwards.
type walker struct {
	o        Options
	problems []Problem
	lines    Lines
	poisoned []string
	short    []string
	nodes    int
	aborted  bool
	// rewrote: a duration with days, or a OneOrList mapping, was
	// rewritten in the tree, which must then be decoded instead of the
	// file's text.
	rewrote bool
}

func newWalker(o Options) *walker { return &walker{o: o, lines: Lines{}} }

func (w *walker) finish(doc *Document) {
	doc.Problems = w.problems
	doc.Lines = w.lines
	doc.Poisoned = w.poisoned
	doc.Short = w.short
	doc.Nodes = w.nodes
}

func (w *walker) add(line int, path, format string, args ...any) {
	if w.o.MaxProblems > 0 && len(w.problems) >= w.o.MaxProblems {
		return
	}
	w.problems = append(w.problems, Problem{File: w.o.File, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// count charges one node visit and reports false once the bound is
// exceeded; the walk then stops.
func (w *walker) count(n *yaml.Node, path string) bool {
	if w.aborted {
		return false
	}
	w.nodes++
	if w.o.MaxNodes > 0 && w.nodes > w.o.MaxNodes {
		w.aborted = true
		w.add(n.Line, path, "document too large: more than %d nodes (aliases expanded)", w.o.MaxNodes)
		return false
	}
	return true
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	textType     = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// isText reports whether a setting of type t is one scalar that t
// decodes itself: *t implements encoding.TextUnmarshaler (netip.Prefix,
// a URL or port type...) and t is not a struct with keys.
func isText(t reflect.Type) bool {
	return textual(t) && !(t.Kind() == reflect.Struct && hasKeys(t))
}

// textual reports whether *t implements encoding.TextUnmarshaler.
func textual(t reflect.Type) bool {
	return t.Kind() != reflect.Pointer && t != durationType && reflect.PointerTo(t).Implements(textType)
}

// hasKeys reports whether struct type t has a field with a yaml tag.
func hasKeys(t reflect.Type) bool {
	for i := range t.NumField() {
		if _, tagged := t.Field(i).Tag.Lookup("yaml"); tagged {
			return true
		}
	}
	return false
}

// walk checks n against type t at path, depth levels down, and reports
// whether the value is usable; when it is not, a problem was reported
// and the caller removes the value.
func (w *walker) walk(n *yaml.Node, t reflect.Type, path string, depth int) bool {
	if !w.count(n, path) {
		return false
	}
	if n.Kind == yaml.AliasNode {
		// Aliases are expanded, and counted again. The walk descends
		// only where the schema does, and no deeper than MaxDepth, so
		// even an alias to a node that contains it ends.
		if n.Alias == nil {
			w.add(n.Line, path, "bad alias")
			return false
		}
		return w.walk(n.Alias, t, path, depth)
	}
	null := isNull(n)
	if t.Kind() == reflect.Pointer {
		if null {
			return true // an optional section left off
		}
		t = t.Elem()
	}
	switch {
	case textual(t) && n.Kind == yaml.ScalarNode && !null,
		isText(t):
		// yaml.v3 hands the scalar's text to UnmarshalText; the walk
		// does the same first, so that its error has the key and line.
		if null && w.o.Lenient {
			return true
		}
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
		if null && w.o.Lenient {
			return true
		}
		if n.Kind != yaml.ScalarNode || null {
			w.add(n.Line, path, "want a duration such as 500ms, 30s, 5m or 1d, got %s", kindName(n))
			return false
		}
		if strings.Contains(n.Value, "d") {
			// The decoder reads time.ParseDuration's syntax, which has
			// no days: write the value in it.
			if d, err := ParseDuration(n.Value); err == nil {
				n.Value, n.Tag, n.Style = d.String(), "!!str", 0
				w.rewrote = true
			}
		}
		if !decodesAs[time.Duration](n) {
			w.add(n.Line, path, "bad duration %q (want e.g. 500ms, 30s, 5m, 1d)", n.Value)
			return false
		}
		return true
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Slice:
		if null && w.o.OneOrList[t] {
			// One item with its defaults, as a section left null.
			*n = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
			return w.one(n, t.Elem(), path, depth+1)
		}
		if null {
			return true // keeps its defaults
		}
		if depth >= MaxDepth {
			w.add(n.Line, path, "nested deeper than %d levels", MaxDepth)
			return false
		}
		if t.Kind() == reflect.Slice {
			if n.Kind == yaml.MappingNode && w.o.OneOrList[t] {
				return w.one(n, t.Elem(), path, depth+1)
			}
			if n.Kind != yaml.SequenceNode {
				want := "a list"
				if w.o.OneOrList[t] {
					want = "a mapping or a list of mappings"
				}
				w.add(n.Line, path, "want %s, got %s", want, kindName(n))
				return false
			}
			return w.sequence(n, t.Elem(), path, depth+1)
		}
		if n.Kind != yaml.MappingNode {
			w.add(n.Line, path, "want %s, got %s", w.describe(t), kindName(n))
			return false
		}
		w.mapping(n, t, path, depth+1)
		return true
	}
	return w.scalar(n, t, path)
}

// scalar checks a leaf. The rules are stricter than yaml.v3's (no "yes"
// for true unless Lenient, no 1.5 truncated into an integer) and the
// conversion itself is yaml.v3's, so what passes here decodes.
func (w *walker) scalar(n *yaml.Node, t reflect.Type, path string) bool {
	null := isNull(n)
	if null && w.o.Lenient {
		return true // the zero value, as yaml.v2 reads it
	}
	tag := n.ShortTag()
	switch t.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode || null || tag == "!!binary" {
			w.add(n.Line, path, "want a string, got %s", kindName(n))
			return false
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || tag != "!!bool" && !(w.o.Lenient && decodesAs[bool](n)) {
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
		// A type the walk does not know; a schema test should keep it
		// out.
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
func (w *walker) mapping(n *yaml.Node, t reflect.Type, path string, depth int) {
	fields := Fields(t)
	byKey := make(map[string]Field, len(fields))
	keys := make([]string, len(fields))
	for i, f := range fields {
		byKey[f.Key] = f
		keys[i] = f.Key
	}
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
		f, ok := byKey[key]
		if !ok {
			if to, moved := w.o.Moved[kp]; moved {
				w.add(k.Line, kp, "moved to %s", to)
			} else {
				w.add(k.Line, kp, "unknown key (known keys: %s)", strings.Join(keys, ", "))
			}
			bad()
			continue
		}
		w.lines[kp] = k.Line
		if !w.walk(v, f.Type, kp, depth) {
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

// sequence checks the items of a list decoded into a slice of et. A bad
// item is replaced by an empty one (yaml.v3 would drop it and shift the
// indices of the rest); a list of scalars that decode themselves has no
// empty item, so it is usable only if all its items are.
func (w *walker) sequence(n *yaml.Node, et reflect.Type, path string, depth int) bool {
	usable := true
	for i, e := range n.Content {
		p := conf.Index(path, i)
		w.lines[p] = e.Line
		ok := true
		if isNull(e) {
			// yaml.v3 drops null items; a list has no optional items.
			if !w.count(e, p) {
				return false
			}
			w.add(e.Line, p, "want %s, got null", w.describe(et))
			ok = false
		} else {
			ok = w.walk(e, et, p, depth)
		}
		if w.aborted {
			return false
		}
		if !ok {
			n.Content[i] = emptyNode(et)
			w.poisoned = append(w.poisoned, p)
			usable = usable && !isText(et)
		}
	}
	return usable
}

// one checks a mapping written where a list of struct type et (an
// Options.OneOrList type) is expected: the list's only item, its keys
// recorded under path itself. The tree is rewritten to that list, which
// yaml.v3 then decodes.
func (w *walker) one(n *yaml.Node, et reflect.Type, path string, depth int) bool {
	w.short = append(w.short, path)
	w.mapping(n, et, path, depth)
	item := *n
	*n = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: n.Line, Column: n.Column, Content: []*yaml.Node{&item}}
	w.rewrote = true
	return true
}

// isShort reports whether the list at path was written as one mapping.
func (w *walker) isShort(path string) bool {
	for _, p := range w.short {
		if p == path {
			return true
		}
	}
	return false
}

// describe names what a list item of type t must be.
func (w *walker) describe(t reflect.Type) string {
	if d, ok := w.o.Describe[t]; ok {
		return d
	}
	switch {
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
	if t.Kind() == reflect.Struct && !isText(t) {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// Field is one key of a struct type.
type Field struct {
	// Key is the YAML key.
	Key string
	// StructField is the field; its Index is relative to the struct type
	// given to [Fields] (reflect.Value.FieldByIndex), through inline
	// sections.
	reflect.StructField
}

// Fields lists the keys of struct type t in declaration order: every
// exported field with a yaml tag other than "-", and the keys of a
// struct field tagged ",inline" as t's own. A type that decodes itself
// from text has none.
func Fields(t reflect.Type) []Field {
	if t.Kind() != reflect.Struct || isText(t) {
		return nil
	}
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		if isInline(f) {
			for _, g := range Fields(f.Type) {
				g.Index = append([]int{i}, g.Index...)
				out = append(out, g)
			}
			continue
		}
		if key := yamlKey(f); key != "" {
			out = append(out, Field{Key: key, StructField: f})
		}
	}
	return out
}

// Keys lists the keys of struct type t, as [Fields] does.
func Keys(t reflect.Type) []string {
	fs := Fields(t)
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.Key
	}
	return keys
}

// IsScalar reports whether a setting of type t is one scalar in a file:
// not a mapping (struct) or a list, but possibly a struct that decodes
// itself from text (netip.Prefix). time.Duration is a scalar.
func IsScalar(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return isText(t) || t.Kind() != reflect.Struct && t.Kind() != reflect.Slice
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

// fillDefaults gives every field of out whose key is absent from the
// lines its default: Options.Default of out's type, and of the type of
// each list item and optional section. A key present in the document
// keeps the decoded value, even zero.
func (w *walker) fillDefaults(out reflect.Value) {
	if w.o.Default == nil {
		return
	}
	w.fill(out, w.defaultOf(out.Type()), "")
}

// defaultOf is the default of a value of type t.
func (w *walker) defaultOf(t reflect.Type) reflect.Value {
	if d := w.o.Default(t); d.IsValid() {
		return d
	}
	return reflect.Zero(t)
}

func (w *walker) fill(v, def reflect.Value, path string) {
	if isText(v.Type()) {
		return // a scalar, decoded as a whole
	}
	switch v.Kind() {
	case reflect.Struct:
		fillNonKeys(v, def)
		for _, f := range Fields(v.Type()) {
			p := conf.Join(path, f.Key)
			fv, dv := v.FieldByIndex(f.Index), def.FieldByIndex(f.Index)
			if _, set := w.lines[p]; !set {
				// Absent: the default. (A zero default changes
				// nothing, which keeps the short form of a list entry,
				// whose value has no key of its own.)
				if !dv.IsZero() {
					fv.Set(dv)
				}
				continue
			}
			w.fill(fv, dv, p)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			w.fill(v.Elem(), w.defaultOf(v.Type().Elem()), path)
		}
	case reflect.Slice:
		d := w.defaultOf(v.Type().Elem())
		short := w.isShort(path)
		for i := range v.Len() {
			p := conf.Index(path, i)
			if short {
				p = path // the one item's keys have no index
			}
			w.fill(v.Index(i), d, p)
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

// errLine extracts the line from a yaml.v3 error ("yaml: line N: ..." or
// "line N: ..."), or returns 0.
func errLine(err error) int {
	_, rest, ok := strings.Cut(err.Error(), "line ")
	if !ok {
		return 0
	}
	num, _, _ := strings.Cut(rest, ":")
	l, _ := strconv.Atoi(num)
	return l
}

// errMsg renders a yaml.v3 syntax error without its line ("bad YAML:
// did not find expected key"); errLine has the line.
func errMsg(err error) string {
	return "bad YAML: " + stripLine(strings.TrimPrefix(err.Error(), "yaml: "))
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

// MaxDurationBytes bounds the text of a duration ParseDuration reads.
const MaxDurationBytes = 64

// ParseDuration parses a configuration duration: time.ParseDuration's
// syntax ("500ms", "1h30m") with a leading whole number of days
// ("1d", "7d", "1d12h"), a day being 24 hours. Text longer than
// MaxDurationBytes is refused.
func ParseDuration(s string) (time.Duration, error) {
	if len(s) > MaxDurationBytes {
		return 0, errors.New("yamlconf: duration too long")
	}
	i := strings.IndexByte(s, 'd')
	if i < 0 {
		return time.ParseDuration(s)
	}
	days, err := strconv.ParseUint(s[:i], 10, 16)
	if err != nil || i == 0 || s[0] == '+' {
		return 0, fmt.Errorf("yamlconf: bad duration %q", s)
	}
	d := time.Duration(days) * 24 * time.Hour
	if rest := s[i+1:]; rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || r < 0 || rest[0] == '-' || rest[0] == '+' {
			return 0, fmt.Errorf("yamlconf: bad duration %q", s)
		}
		d += r
	}
	if d < 0 || days > 106_751 { // time.Duration holds 292 years
		return 0, fmt.Errorf("yamlconf: duration %q too long", s)
	}
	return d, nil
}
