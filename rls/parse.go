package rls

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// pos is where a key was written.
type pos struct {
	file string
	line int
}

// parser decodes YAML nodes into DomainConfigs strictly, naming every
// error by file, line and YAML path (never by Go type), and records the
// line of every path for the errors Validate finds later.
type parser struct {
	file  string
	doc   int
	nodes int
	// lines maps domain + "\x00" + path to where it was written; offset
	// counts a domain's top-level descriptors so far (merged domains
	// continue the index).
	lines  map[string]pos
	offset map[string]int
	domain string
}

func (p *parser) fail(n *yaml.Node, path, msg string, args ...any) error {
	e := &ConfigError{File: p.file, Domain: p.domain, Path: path, Msg: fmt.Sprintf(msg, args...)}
	if n != nil {
		e.Line = n.Line
	}
	if p.domain == "" {
		e.Doc = p.doc
	}
	return e
}

// mapping returns the key and value nodes of m, refusing keys outside
// known and keys written twice. A null node is an empty mapping.
func (p *parser) mapping(m *yaml.Node, path string, known ...string) ([][2]*yaml.Node, error) {
	m, err := p.deref(m, path)
	if err != nil {
		return nil, err
	}
	if isNull(m) {
		return nil, nil
	}
	if m.Kind != yaml.MappingNode {
		return nil, p.fail(m, path, "must be a mapping of %s", strings.Join(known, ", "))
	}
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, p.fail(k, path, "keys must be names")
		}
		ok := false
		for _, w := range known {
			ok = ok || k.Value == w
		}
		sub := join(path, k.Value)
		if !ok {
			return nil, p.fail(k, sub, "unknown key (known: %s)", strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return nil, p.fail(k, sub, "written twice")
		}
		seen[k.Value] = true
		v, err := p.deref(v, sub)
		if err != nil {
			return nil, err
		}
		out = append(out, [2]*yaml.Node{k, v})
	}
	return out, nil
}

// deref follows aliases and counts nodes against MaxYAMLNodes.
func (p *parser) deref(n *yaml.Node, path string) (*yaml.Node, error) {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		if i > 16 {
			return nil, p.fail(n, path, "aliases nested too deep")
		}
		n = n.Alias
	}
	p.nodes++
	if p.nodes > MaxYAMLNodes {
		return nil, p.fail(n, path, "the configuration expands to more than %d YAML nodes", MaxYAMLNodes)
	}
	return n, nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// str decodes a scalar as text, as envoyproxy/ratelimit's YAML library
// does (value: 8080 is "8080"); null is "".
func (p *parser) str(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.fail(n, path, "must be a string")
	}
	if isNull(n) {
		return "", nil
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, path string) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || isNull(n) || n.Decode(&b) != nil {
		return false, p.fail(n, path, "%q must be true or false", n.Value)
	}
	return b, nil
}

func (p *parser) uint32(n *yaml.Node, path string) (uint32, error) {
	var u uint32
	if isNull(n) {
		return 0, nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&u) != nil {
		return 0, p.fail(n, path, "%q must be a whole number from 0 to 4294967295", n.Value)
	}
	return u, nil
}

func (p *parser) seq(n *yaml.Node, path string) ([]*yaml.Node, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.fail(n, path, "must be a list")
	}
	return n.Content, nil
}

func (p *parser) mark(path string, n *yaml.Node) {
	if p.domain != "" {
		if _, ok := p.lines[p.domain+"\x00"+path]; !ok {
			p.lines[p.domain+"\x00"+path] = pos{p.file, n.Line}
		}
	}
}

// document decodes one YAML document.
func (p *parser) document(doc *yaml.Node) (DomainConfig, error) {
	var d DomainConfig
	p.domain = ""
	root := doc
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return d, p.fail(doc, "", "empty document: domain is required")
		}
		root = doc.Content[0]
	}
	kvs, err := p.mapping(root, "", "domain", "descriptors", "settings")
	if err != nil {
		return d, err
	}
	var descs *yaml.Node
	for _, kv := range kvs {
		switch kv[0].Value {
		case "domain":
			if d.Domain, err = p.str(kv[1], "domain"); err != nil {
				return d, err
			}
		case "descriptors":
			descs = kv[1]
		case "settings":
			if d.Settings, err = p.settings(kv[1]); err != nil {
				return d, err
			}
		}
	}
	if d.Domain == "" && d.Settings == nil {
		return d, p.fail(root, "domain", "required: a domain name of 1 to %d bytes", MaxNameLen)
	}
	p.domain = d.Domain
	if descs != nil {
		if d.Domain == "" {
			return d, p.fail(descs, "descriptors", "belong to a domain: settings go in a document of their own")
		}
		if p.offset == nil {
			p.offset = map[string]int{}
		}
		off := p.offset[d.Domain]
		if d.Descriptors, err = p.descriptors(descs, "", off, 1); err != nil {
			return d, err
		}
		p.offset[d.Domain] = off + len(d.Descriptors)
	}
	return d, nil
}

func (p *parser) settings(n *yaml.Node) (*Settings, error) {
	s := &Settings{}
	kvs, err := p.mapping(n, "settings", "response_headers", "stop_counting_over_limit", "response_metadata", "merge_domains")
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		path := "settings." + kv[0].Value
		b, err := p.boolean(kv[1], path)
		if err != nil {
			return nil, err
		}
		switch kv[0].Value {
		case "response_headers":
			s.ResponseHeaders = &b
		case "stop_counting_over_limit":
			s.StopCountingOverLimit = b
		case "response_metadata":
			s.ResponseMetadata = b
		case "merge_domains":
			s.MergeDomains = b
		}
	}
	return s, nil
}

func (p *parser) descriptors(n *yaml.Node, path string, offset, depth int) ([]Descriptor, error) {
	items, err := p.seq(n, path+"descriptors")
	if err != nil {
		return nil, err
	}
	if depth > MaxDepth && len(items) > 0 {
		return nil, p.fail(n, path+"descriptors", "nested deeper than %d", MaxDepth)
	}
	if len(items) > MaxDescriptors {
		return nil, p.fail(n, path+"descriptors", "more than %d descriptors", MaxDescriptors)
	}
	out := make([]Descriptor, 0, len(items))
	for i, it := range items {
		here := fmt.Sprintf("%sdescriptors[%d]", path, offset+i)
		p.mark(here, it)
		kvs, err := p.mapping(it, here, "key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold")
		if err != nil {
			return nil, err
		}
		var d Descriptor
		for _, kv := range kvs {
			k, v := kv[0].Value, kv[1]
			sub := here + "." + k
			p.mark(sub, kv[0])
			switch k {
			case "key":
				d.Key, err = p.str(v, sub)
			case "value":
				d.Value, err = p.str(v, sub)
			case "rate_limit":
				if !isNull(v) { // rate_limit: ~ is no limit, as in envoyproxy/ratelimit
					d.RateLimit, err = p.rateLimit(v, sub)
				}
			case "descriptors":
				d.Descriptors, err = p.descriptors(v, here+".", 0, depth+1)
			case "shadow_mode":
				d.ShadowMode, err = p.boolean(v, sub)
			case "quota_mode":
				d.QuotaMode, err = p.boolean(v, sub)
			case "detailed_metric":
				d.DetailedMetric, err = p.boolean(v, sub)
			case "value_to_metric":
				d.ValueToMetric, err = p.boolean(v, sub)
			case "share_threshold":
				d.ShareThreshold, err = p.boolean(v, sub)
			}
			if err != nil {
				return nil, err
			}
		}
		out = append(out, d)
	}
	return out, nil
}

func (p *parser) rateLimit(n *yaml.Node, path string) (*RateLimit, error) {
	kvs, err := p.mapping(n, path, "unit", "requests_per_unit", "unlimited", "name", "replaces")
	if err != nil {
		return nil, err
	}
	r := &RateLimit{}
	for _, kv := range kvs {
		k, v := kv[0].Value, kv[1]
		sub := path + "." + k
		p.mark(sub, kv[0])
		switch k {
		case "unit":
			r.Unit, err = p.str(v, sub)
		case "requests_per_unit":
			r.RequestsPerUnit, err = p.uint32(v, sub)
		case "unlimited":
			r.Unlimited, err = p.boolean(v, sub)
		case "name":
			r.Name, err = p.str(v, sub)
		case "replaces":
			var items []*yaml.Node
			if items, err = p.seq(v, sub); err != nil {
				return nil, err
			}
			if len(items) > MaxReplaces {
				return nil, p.fail(v, sub, "more than %d names", MaxReplaces)
			}
			for i, it := range items {
				at := fmt.Sprintf("%s[%d]", sub, i)
				p.mark(at, it)
				var rkv [][2]*yaml.Node
				if rkv, err = p.mapping(it, at, "name"); err != nil {
					return nil, err
				}
				var rp Replace
				for _, kv := range rkv {
					p.mark(at+".name", kv[0])
					if rp.Name, err = p.str(kv[1], at+".name"); err != nil {
						return nil, err
					}
				}
				r.Replaces = append(r.Replaces, rp)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}
