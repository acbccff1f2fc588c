package yamlconf

import (
	"strings"
	"testing"
)

// FuzzDecode: on any input, decoding never panics, stays within its
// bounds, reports well-formed problems, and the walk is at least as
// strict as yaml.v3: after the walk, yaml.v3 never refuses what is left
// ("cannot decode"), with a flat schema with defaults, short forms and
// text types, and with a recursive one, lenient or not. Seeds:
// testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("size: 1\nitems: [{name: a, weight: 2}]\nentries: [10.0.0.1, {ip: x}]\n"))
	f.Add([]byte("key: a\nnodes: [{key: b, limit: {unit: s}, nodes: [{key: c}]}]\n"))
	f.Add([]byte("nodes: &l [{key: x, nodes: *l}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		o := schemaOptions
		o.MaxNodes, o.MaxProblems = 10_000, 50
		check := func(d *Document) {
			if len(d.Problems) > o.MaxProblems || d.Nodes > o.MaxNodes+1 {
				t.Fatalf("%d problems, %d nodes", len(d.Problems), d.Nodes)
			}
			for _, p := range d.Problems {
				if p.Msg == "" || p.File != o.File {
					t.Fatalf("malformed problem %+v", p)
				}
				if strings.HasPrefix(p.Msg, "cannot decode: ") {
					t.Fatalf("yaml.v3 refused what the walk accepted: %s", p)
				}
			}
		}
		check(Decode(data, &schema{}, o))
		check(Decode(data, &node{}, o))
		o.Lenient = true
		check(Decode(data, &node{}, o))
		check(Decode(data, &textSchema{}, o))
	})
}

// textSchema has settings that decode themselves.
type textSchema struct {
	Port  port   `yaml:"port"`
	Ports []port `yaml:"ports"`
	Count uint8  `yaml:"count"`
	Opt   *entry `yaml:"opt"`
}
