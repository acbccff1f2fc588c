package gateway

import (
	"fmt"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// The configuration reference (docs/configuration.md) is checked against
// the configuration types: one table row per key, in the form
//
//	| `routes[].rate_limit.qps` | number | — | 0.001 to 1000000 | ... |
//
// with the key's path ("[]" marks a list item), its type, and its
// default as DefaultConfig and the element defaults give it ("—" for a
// zero value with nothing to show; section rows' defaults are free text).
// A key missing from the page, a row for a key that does not exist, a
// wrong type or a stale default fails TestConfigReference, which prints
// the rows to add.

const configDocPath = "../docs/configuration.md"

// configKey is one key of the schema with its type and default.
type configKey struct {
	path string
	typ  string
	def  string // rendered default; "" for sections
	zero bool   // the default is the type's zero value
}

// configKeys walks Config's yaml tags from the defaults.
func configKeys() []configKey {
	var out []configKey
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for _, f := range yamlconf.Fields(v.Type()) {
			p := conf.Join(path, f.Key)
			fv := v.FieldByIndex(f.Index)
			ft := f.Type
			switch {
			case ft.Kind() == reflect.Struct && yamlconf.IsScalar(ft):
				// Decodes itself from text (netip.Prefix).
				out = append(out, configKey{path: p, typ: "string", def: renderDefault(fv), zero: fv.IsZero()})
			case ft.Kind() == reflect.Struct:
				out = append(out, configKey{path: p, typ: "section"})
				walk(fv, p)
			case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct:
				out = append(out, configKey{path: p, typ: "optional section", def: "off", zero: fv.IsNil()})
				walk(defaultOf(ft.Elem()), p)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				out = append(out, configKey{path: p, typ: "list", def: renderDefault(fv), zero: fv.Len() == 0})
				walk(defaultOf(ft.Elem()), p+"[]")
			default:
				out = append(out, configKey{path: p, typ: typeName(ft), def: renderDefault(fv), zero: fv.IsZero()})
			}
		}
	}
	walk(reflect.ValueOf(*DefaultConfig()), "")
	return out
}

// defaultOf is the default of a list item or optional section of type t.
func defaultOf(t reflect.Type) reflect.Value {
	if d := elementDefault(t); d.IsValid() {
		return d
	}
	return reflect.Zero(t)
}

var durationType = reflect.TypeFor[time.Duration]()

func typeName(t reflect.Type) string {
	v := reflect.Zero(t)
	switch {
	case t == durationType:
		return "duration"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Bool:
		return "bool"
	case v.CanInt() || v.CanUint():
		return "int"
	case t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() == reflect.Slice:
		return "[" + typeName(t.Elem()) + "]"
	}
	return t.String()
}

// renderDefault writes a default as the page shows it: YAML-ish scalars,
// durations without zero units (1m, not 1m0s), lists in flow style.
func renderDefault(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return shortDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.String:
		if v.String() == "" {
			return `""`
		}
		return v.String()
	case v.Kind() == reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case v.CanInt():
		return strconv.FormatInt(v.Int(), 10)
	case v.CanUint():
		return strconv.FormatUint(v.Uint(), 10)
	case v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case v.Kind() == reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = renderDefault(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// docRow is one row of a reference table: its cells, unescaped.
type docRow struct {
	line  int
	cells []string
}

// docTableRows returns the rows of every table whose first cell is a
// `code` span, keyed by that code.
func docTableRows(text string) (map[string]docRow, []string) {
	rows := map[string]docRow{}
	var dups []string
	for n, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		var cells []string
		var cur []byte
		for i := 1; i < len(line); i++ {
			switch {
			case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
				cur = append(cur, '|')
				i++
			case line[i] == '|':
				cells = append(cells, strings.TrimSpace(string(cur)))
				cur = cur[:0]
			default:
				cur = append(cur, line[i])
			}
		}
		key := strings.Trim(cells[0], "`")
		if _, dup := rows[key]; dup {
			dups = append(dups, key)
		}
		rows[key] = docRow{line: n + 1, cells: cells}
	}
	return rows, dups
}

// TestConfigReference: docs/configuration.md has exactly one row per
// configuration key, with the key's type and default.
func TestConfigReference(t *testing.T) {
	data, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatal(err)
	}
	rows, dups := docTableRows(string(data))
	for _, d := range dups {
		t.Errorf("%s: `%s` has two rows", configDocPath, d)
	}
	keys := configKeys()
	if len(keys) < 100 {
		t.Fatalf("the schema walk found %d keys", len(keys))
	}
	var missing []string
	known := map[string]bool{}
	for _, k := range keys {
		known[k.path] = true
		r, ok := rows[k.path]
		if !ok {
			def := k.def
			if k.zero || def == "" {
				def = "—"
			}
			missing = append(missing, fmt.Sprintf("| `%s` | %s | %s | | |", k.path, k.typ, def))
			continue
		}
		if len(r.cells) != 5 {
			t.Errorf("%s:%d: `%s`: %d cells, want 5 (key, type, default, values, meaning)", configDocPath, r.line, k.path, len(r.cells))
			continue
		}
		if r.cells[1] != k.typ {
			t.Errorf("%s:%d: `%s` is documented as %q, but it is a %s", configDocPath, r.line, k.path, r.cells[1], k.typ)
		}
		if strings.Contains(k.typ, "section") || k.typ == "list" && !k.zero {
			continue // a section's default column is prose, as a list's that has one
		}
		doc := strings.Trim(r.cells[2], "`")
		switch {
		case doc == "—" && k.zero:
		case doc == k.def:
		default:
			t.Errorf("%s:%d: `%s` default is documented as %q; the code's default is %q", configDocPath, r.line, k.path, r.cells[2], k.def)
		}
		if strings.TrimSpace(r.cells[4]) == "" {
			t.Errorf("%s:%d: `%s` has no meaning", configDocPath, r.line, k.path)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s lacks %d key(s); add these rows (values and meaning to fill in):\n%s", configDocPath, len(missing), strings.Join(missing, "\n"))
	}
	for key, r := range rows {
		if !known[key] && strings.Contains(key, ".") || !known[key] && isTopLevelSection(key) {
			t.Errorf("%s:%d: `%s` is not a configuration key", configDocPath, r.line, key)
		}
	}
}

// isTopLevelSection reports whether key looks like a top-level key (a
// row for a removed section must fail too).
func isTopLevelSection(key string) bool {
	for _, c := range key {
		if (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}

// TestDocsLinks: every relative link of the documentation names a file
// that exists, and every #anchor a heading of that file.
func TestDocsLinks(t *testing.T) {
	var pages []string
	err := filepath.WalkDir("../docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md", "../CHANGELOG.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(data)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if fi, err := os.Stat(path); err == nil && fi.IsDir() && anchor == "" {
				continue // a folder (GitHub lists it)
			}
			text, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if anchor != "" && !slices.Contains(headingSlugs(string(text)), anchor) {
				t.Errorf("%s: link %q: no heading #%s in %s", page, target, anchor, path)
			}
		}
	}
}

// stripCode removes fenced code blocks (links there are not links).
func stripCode(s string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// headingSlugs returns the GitHub anchors of a Markdown file's headings.
func headingSlugs(s string) []string {
	var out []string
	for _, line := range strings.Split(stripCode(s), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		out = append(out, b.String())
	}
	return out
}
