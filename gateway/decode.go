package gateway

import (
	"fmt"
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
	// maxNodes bounds the YAML nodes the decoder visits (alias expansion
	// included), which defeats "billion laughs" documents.
	maxNodes = 100_000
	// maxProblems bounds the problems one load reports.
	maxProblems = 200
)

// Problem is one thing wrong with a configuration: where it is (file,
// line, key path) and what is wrong, including the allowed range for
// numeric settings.
type Problem struct {
	// File is the configuration file name, or "" for problems in the
	// process environment.
	File string
	// Line is the 1-based line of the offending key, or 0 when unknown.
	Line int
	// Path is the key path, e.g. "routes[0].rate_limit.qps", or the name
	// of an environment variable.
	Path string
	// Msg says what is wrong.
	Msg string
}

// String renders the problem as "file:line: path: msg".
func (p Problem) String() string {
	var b strings.Builder
	switch {
	case p.File != "" && p.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", p.File, p.Line)
	case p.File != "":
		b.WriteString(p.File + ": ")
	default:
		b.WriteString("environment: ")
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
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

// defaulter is implemented by configuration structs whose fields have
// defaults; the decoder calls it on every newly created value before
// filling it from the document.
type defaulter interface{ setDefaults() }

// decoder turns a yaml.Node tree into configuration structs, strictly:
// unknown keys, duplicate keys, wrong types and malformed durations are
// problems, and every problem carries the line and key path. It never
// stops at the first problem.
type decoder struct {
	file     string
	problems []Problem
	lines    map[string]int // key path → line of the key
	nodes    int
	syntax   bool // the document did not parse
}

func (d *decoder) add(line int, path, format string, args ...any) {
	if len(d.problems) >= maxProblems {
		return
	}
	d.problems = append(d.problems, Problem{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// line returns the line recorded for path, or for its nearest recorded
// parent, or 0.
func (d *decoder) line(path string) int {
	for {
		if l, ok := d.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i <= 0 {
			return d.lines[""]
		}
		path = path[:i]
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	listEntryType = reflect.TypeFor[ListEntry]()
)

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unsupported node"
}

// decode fills v (addressable) from n. path is v's key path.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	d.nodes++
	if d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.add(n.Line, path, "document too large: more than %d nodes", maxNodes)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.add(n.Line, path, "bad alias")
			return
		}
		n = n.Alias
	}
	null := n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"

	if v.Type() == durationType {
		if n.Kind != yaml.ScalarNode || null {
			d.add(n.Line, path, "want a duration such as 500ms, 30s or 5m, got %s", kindName(n))
			return
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			d.add(n.Line, path, "bad duration %q (want e.g. 500ms, 30s, 5m)", n.Value)
			return
		}
		v.SetInt(int64(dur))
		return
	}

	if v.Type() == listEntryType && n.Kind == yaml.ScalarNode && !null {
		// The short form of a list entry: just the address or prefix.
		v.FieldByName("IP").SetString(n.Value)
		return
	}

	switch v.Kind() {
	case reflect.Pointer:
		if null {
			v.SetZero()
			return
		}
		nv := reflect.New(v.Type().Elem())
		if df, ok := nv.Interface().(defaulter); ok {
			df.setDefaults()
		}
		d.decode(n, nv.Elem(), path)
		v.Set(nv)
	case reflect.Struct:
		if null {
			return // keep defaults
		}
		if n.Kind != yaml.MappingNode {
			d.add(n.Line, path, "want a mapping, got %s", kindName(n))
			return
		}
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if null {
			v.SetZero()
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.add(n.Line, path, "want a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = c.Line
			e := s.Index(i)
			if df, ok := e.Addr().Interface().(defaulter); ok {
				df.setDefaults()
			}
			d.decode(c, e, p)
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || null {
			d.add(n.Line, path, "want a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.add(n.Line, path, "want true or false, got %s", kindName(n))
			return
		}
		v.SetBool(n.Value == "true" || n.Value == "True" || n.Value == "TRUE")
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			d.add(n.Line, path, "want an integer, got %s", kindName(n))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || (v.Kind() == reflect.Int && (i > math.MaxInt32 || i < math.MinInt32)) {
			d.add(n.Line, path, "integer %s out of representable range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
			d.add(n.Line, path, "want a number, got %s", kindName(n))
			return
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil {
			// YAML integers may be written in octal or hex.
			i, ierr := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
			if ierr != nil {
				d.add(n.Line, path, "bad number %q", n.Value)
				return
			}
			f = float64(i)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			d.add(n.Line, path, "want a finite number, got %s", n.Value)
			return
		}
		v.SetFloat(f)
	default:
		d.add(n.Line, path, "unsupported setting type %s", v.Type())
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	fields := make(map[string]int, t.NumField())
	var known []string
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("yaml")
		name, _, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = i
		known = append(known, name)
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.add(k.Line, path, "keys must be plain strings")
			continue
		}
		key := k.Value
		kp := join(path, key)
		if first, dup := seen[key]; dup {
			d.add(k.Line, kp, "duplicate key (first set at line %d)", first)
			continue
		}
		seen[key] = k.Line
		fi, ok := fields[key]
		if !ok {
			d.add(k.Line, kp, "unknown key (known keys: %s)", strings.Join(known, ", "))
			continue
		}
		d.lines[kp] = k.Line
		d.decode(val, v.Field(fi), kp)
	}
}

// decodeDocument parses data and decodes its single document into cfg.
func (d *decoder) decodeDocument(data []byte, cfg *Config) {
	var doc yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			return // empty document: defaults only
		}
		d.add(yamlErrLine(err), "", "%s", yamlErrMsg(err))
		d.syntax = true
		return
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.add(extra.Line, "", "more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return
	}
	root := doc.Content[0]
	d.lines[""] = root.Line
	d.decode(root, reflect.ValueOf(cfg).Elem(), "")
}

// yamlErrLine extracts the line from a yaml.v3 syntax error ("yaml: line
// N: ..."), or returns 0.
func yamlErrLine(err error) int {
	s := err.Error()
	_, rest, ok := strings.Cut(s, "line ")
	if !ok {
		return 0
	}
	num, _, _ := strings.Cut(rest, ":")
	l, _ := strconv.Atoi(num)
	return l
}

func yamlErrMsg(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	if i := strings.Index(s, "line "); i == 0 {
		if j := strings.Index(s, ": "); j > 0 {
			s = s[j+2:]
		}
	}
	return "bad YAML: " + s
}
