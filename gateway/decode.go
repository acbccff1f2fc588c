package gateway

import (
	"fmt"
	"reflect"
	"time"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/proxyproto"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/ratelimit"
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

// document is a decoded configuration file: the Config (defaults
// applied), and what decoding found (problems, lines, poisoned paths).
type document struct {
	cfg *Config
	*yamlconf.Document
}

var (
	configType    = reflect.TypeFor[Config]()
	listEntryType = reflect.TypeFor[ipset.StaticEntry]()
)

// decodeOptions is how a gateway configuration file is decoded.
var decodeOptions = yamlconf.Options{
	MaxBytes:    MaxConfigBytes,
	MaxNodes:    maxNodes,
	MaxProblems: maxProblems,
	Default: func(t reflect.Type) reflect.Value {
		if t == configType {
			return reflect.ValueOf(DefaultConfig()).Elem()
		}
		return elementDefault(t)
	},
	Moved: map[string]string{
		"shield.trusted_proxies": "client_ip.trusted_proxies (it decides the client for every layer)",
	},
	Describe: map[reflect.Type]string{
		listEntryType: "an address, a prefix or a mapping {ip, reason}",
	},
	OneOrList: map[reflect.Type]bool{
		reflect.TypeFor[Listeners](): true, // listen: one mapping, or a list
	},
}

// decodeDocument decodes the configuration file data (named name in
// problems) into a Config with defaults (yamlconf.Decode): it never stops
// at the first problem; a bad value is reported and left out (so its key
// takes its default) and the rest is decoded, so that validation can
// report its problems too.
func decodeDocument(name string, data []byte) *document {
	o := decodeOptions
	o.File = name
	cfg := &Config{}
	doc := &document{cfg: cfg, Document: yamlconf.Decode(data, cfg, o)}
	if !doc.Fatal {
		deriveDefaults(cfg, doc.Lines)
	}
	cfg.lines = doc.Lines
	cfg.File = name
	return doc
}

// elementDefault is the default of a list item or optional section of
// type t: what a key left out of it takes (invalid: t's zero value).
func elementDefault(t reflect.Type) reflect.Value {
	var d any
	switch t {
	case reflect.TypeFor[proxy.Upstream]():
		d = DefaultUpstream()
	case reflect.TypeFor[proxy.ActiveCheck]():
		d = proxy.DefaultActiveCheck()
	case reflect.TypeFor[proxy.PassiveCheck]():
		d = proxy.DefaultPassiveCheck()
	case reflect.TypeFor[ratelimit.Config]():
		d = ratelimit.DefaultConfig()
	case reflect.TypeFor[login.Policy]():
		d = login.DefaultPolicy()
	case reflect.TypeFor[quota.Config]():
		d = quota.DefaultConfig()
	case reflect.TypeFor[proxyproto.Config]():
		d = proxyproto.Config{}.WithDefaults()
	case listEntryType:
		d = ipset.StaticEntry{Reason: defaultReason}
	case reflect.TypeFor[Listen]():
		d = DefaultListen()
	case reflect.TypeFor[TLS]():
		d = TLS{WatchInterval: defaultWatchInterval}
	case reflect.TypeFor[ACME]():
		d = DefaultACME()
	default:
		return reflect.Value{}
	}
	return reflect.ValueOf(d)
}

// deriveDefaults sets the defaults that depend on other keys: an upstream
// timeout left out never exceeds the upstream's total (a total of 2s with
// the connect default of 5s means connect 2s).
//
// A redis section without a profile key puts the file in the cluster
// profile: Redis is used nowhere else (an RLS-only deployment is just
// redis and rls).
func deriveDefaults(cfg *Config, lines yamlconf.Lines) {
	if _, set := lines["profile"]; !set {
		if _, redis := lines["redis"]; redis {
			cfg.Profile = Cluster
		}
	}
	for i := range cfg.Upstreams {
		t := &cfg.Upstreams[i].Timeouts
		p := fmt.Sprintf("upstreams[%d].timeouts.", i)
		for key, f := range map[string]*time.Duration{"connect": &t.Connect, "response_header": &t.ResponseHeader, "per_try": &t.PerTry} {
			if _, set := lines[p+key]; !set && t.Total > 0 {
				*f = min(*f, t.Total)
			}
		}
		if a := cfg.Upstreams[i].Health.Active; a != nil {
			if _, set := lines[fmt.Sprintf("upstreams[%d].health.active.timeout", i)]; !set && a.Interval > 0 {
				a.Timeout = min(a.Timeout, a.Interval)
			}
		}
	}
}
