package rls

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
)

// pos is where a key was written.
type pos struct {
	file string
	line int
}

// parser decodes the YAML documents of a configuration into
// DomainConfigs with the configuration walker (conf/yamlconf): strictly,
// naming every error by file, line and YAML path (never by Go type). It
// records the line of every path under a domain's descriptors for the
// errors Validate finds later.
type parser struct {
	file string
	doc  int
	// nodes counts the YAML nodes of all documents so far, aliases
	// expanded.
	nodes int
	// lines maps domain + "\x00" + path to where it was written; offset
	// counts a domain's top-level descriptors so far (merged domains
	// continue the index).
	lines  map[string]pos
	offset map[string]int
}

// documentOptions is how a document is decoded: as
// envoyproxy/ratelimit's YAML library (yaml.v2) reads it (yes/no
// booleans, null the zero value: rate_limit: ~ is no limit), with a
// value of any scalar read as its text (value: 8080 is "8080").
var documentOptions = yamlconf.Options{MaxNodes: MaxYAMLNodes, MaxProblems: 1, Lenient: true}

// document decodes one YAML document.
func (p *parser) document(n *yaml.Node) (DomainConfig, error) {
	var d DomainConfig
	fail := func(line int, path, msg string, args ...any) error {
		return &ConfigError{File: p.file, Line: line, Doc: p.doc, Path: path, Msg: fmt.Sprintf(msg, args...)}
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 0 {
		return d, fail(n.Line, "", "empty document: domain is required")
	}
	o := documentOptions
	o.File = p.file
	doc := yamlconf.DecodeNode(n, &d, o)
	p.nodes += doc.Nodes
	if len(doc.Problems) > 0 {
		pr := doc.Problems[0]
		e := fail(pr.Line, pr.Path, "%s", pr.Msg).(*ConfigError)
		if d.Domain != "" && strings.HasPrefix(pr.Path, "descriptors") {
			e.Domain, e.Doc = d.Domain, 0
		}
		return d, e
	}
	if p.nodes > MaxYAMLNodes {
		return d, fail(0, "", "the configuration expands to more than %d YAML nodes", MaxYAMLNodes)
	}
	if _, set := doc.Lines["settings"]; set && d.Settings == nil {
		d.Settings = &Settings{} // settings: ~
	}
	if d.Domain == "" && d.Settings == nil {
		return d, fail(doc.Lines[""], "domain", "required: a domain name of 1 to %d bytes", MaxNameLen)
	}
	if len(d.Descriptors) > 0 && d.Domain == "" {
		return d, fail(doc.Lines["descriptors"], "descriptors", "belong to a domain: settings go in a document of their own")
	}
	if d.Domain == "" {
		return d, nil
	}
	if p.offset == nil {
		p.offset = map[string]int{}
	}
	off := p.offset[d.Domain]
	for path, line := range doc.Lines {
		rest, ok := strings.CutPrefix(path, "descriptors[")
		if !ok {
			continue
		}
		if off > 0 {
			num, tail, _ := strings.Cut(rest, "]")
			i, _ := strconv.Atoi(num)
			path = "descriptors[" + strconv.Itoa(off+i) + "]" + tail
		}
		if _, seen := p.lines[d.Domain+"\x00"+path]; !seen {
			p.lines[d.Domain+"\x00"+path] = pos{p.file, line}
		}
	}
	p.offset[d.Domain] = off + len(d.Descriptors)
	return d, nil
}
