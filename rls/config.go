package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
)

// Bounds on configurations and requests.
const (
	MaxDomains        = 256
	MaxDescriptors    = 10_000 // configured descriptor nodes, all domains
	MaxDepth          = 8      // nesting of configured descriptors
	MaxConfigBytes    = 1 << 20
	MaxNameLen        = 128 // domain, key, limit name
	MaxValueLen       = 256 // configured and requested values
	MaxReplaces       = 64  // names in one rate_limit.replaces
	MaxReqDescriptors = 64  // descriptors in one request
	MaxReqEntries     = 16  // entries in one request descriptor
	MaxHits           = 1_000_000
	// MaxYAMLNodes bounds the YAML nodes one configuration may expand to
	// (aliases included).
	MaxYAMLNodes = 1 << 20
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("rls: invalid config")

// ConfigError is one configuration error, named in the file's own
// terms: "ratelimit.yaml:12: domain: edge: descriptors[2].rate_limit.unit:
// "fortnight" is not a unit: second, minute, hour, day, week, month or
// year". It wraps [ErrConfig].
type ConfigError struct {
	// File is the file within a configuration directory ("" for a single
	// file or a configuration built in Go); Line the line (0: unknown).
	File string
	Line int
	// Doc is the YAML document (1-based) when the domain is not known.
	Doc int
	// Domain names the domain; Path the key within its document
	// ("descriptors[2].rate_limit.unit"), "" for the document itself.
	Domain, Path string
	Msg          string
}

// Error renders "file:line: domain: d: path: msg", leaving out what is
// unknown.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(ErrConfig.Error())
	b.WriteString(": ")
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	switch {
	case e.Domain != "":
		fmt.Fprintf(&b, "domain: %s: ", e.Domain)
	case e.Doc > 0:
		fmt.Fprintf(&b, "document %d: ", e.Doc)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// DomainConfig is one YAML document: one domain's rate limits in
// envoyproxy/ratelimit's format, or (Bulwark's) the server's [Settings]
// in a document of its own with only a settings key.
//
//	domain: edge
//	descriptors:
//	  - key: remote_address
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	  - key: path
//	    value: /login
//	    shadow_mode: true
//	    rate_limit: {unit: minute, requests_per_unit: 5}
//	    descriptors:
//	      - key: user
//	        rate_limit: {unit: minute, requests_per_unit: 2}
type DomainConfig struct {
	Domain      string       `yaml:"domain"`
	Descriptors []Descriptor `yaml:"descriptors"`
	// Settings, set only in a document without domain, holds the
	// server's switches (at most one such document).
	Settings *Settings `yaml:"settings"`
}

// Settings are the server-wide switches envoyproxy/ratelimit reads from
// its environment.
type Settings struct {
	// ResponseHeaders adds the IETF RateLimit, RateLimit-Policy and
	// Retry-After fields of the most restrictive descriptor to every
	// limited answer (response_headers_to_add). Default (nil) true.
	ResponseHeaders *bool `yaml:"response_headers"`
	// StopCountingOverLimit: when a request is over the limit on one
	// descriptor, its other descriptors are not counted
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	StopCountingOverLimit bool `yaml:"stop_counting_over_limit"`
	// ResponseMetadata fills the answer's dynamic_metadata with the
	// request's domain, descriptors and hits, and the quota_mode
	// violations (RESPONSE_DYNAMIC_METADATA).
	ResponseMetadata bool `yaml:"response_metadata"`
	// MergeDomains merges the descriptors of a domain defined in several
	// documents or files, instead of refusing the second definition
	// (MERGE_DOMAIN_CONFIG).
	MergeDomains bool `yaml:"merge_domains"`
}

// Descriptor is one node of a domain's tree. A node without Value matches
// any value of Key, each distinct value counted separately; a Value ending
// in '*' matches values with the prefix before it (a '*' anywhere else is
// a literal character, as in envoyproxy/ratelimit); any other Value
// matches exactly. An exact value wins over a prefix, which wins over the
// key alone; among prefixes the first in the file wins.
type Descriptor struct {
	Key         string       `yaml:"key"`
	Value       string       `yaml:"value"`
	RateLimit   *RateLimit   `yaml:"rate_limit"`
	ShadowMode  bool         `yaml:"shadow_mode"`
	Descriptors []Descriptor `yaml:"descriptors"`
	// QuotaMode answers OK when the limit is exceeded and reports the
	// violation in the response metadata ([Settings.ResponseMetadata]).
	QuotaMode bool `yaml:"quota_mode"`
	// ShareThreshold, on a value ending in '*', counts every value the
	// prefix matches in one bucket instead of one bucket per value.
	ShareThreshold bool `yaml:"share_threshold"`
	// DetailedMetric keeps decision counters for this descriptor
	// ([Server.EachDescriptor]), labelled by its path in the
	// configuration. envoyproxy/ratelimit names these statistics after
	// the request's values; Bulwark never does (its clients choose
	// them): every value the node matches counts under the configured
	// name. ValueToMetric asks for the client's value in the name and
	// is refused by [Validate], naming it.
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
}

// RateLimit is a node's limit: RequestsPerUnit per Unit (second, minute,
// hour, day, week, month of 30 days or year of 365 days), enforced as
// GCRA with that rate
// and a burst of RequestsPerUnit (envoyproxy/ratelimit counts fixed
// windows instead). RequestsPerUnit 0 (or absent) refuses every request.
// Unlimited exempts the node.
type RateLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
	// Name is reported as current_limit.name and names the limit in
	// the RateLimit-Policy field (empty: the descriptor's key path
	// there); Replaces names the limits this one replaces when both
	// apply to one request.
	Name     string    `yaml:"name"`
	Replaces []Replace `yaml:"replaces"`
}

// Replace names a limit that a [RateLimit] replaces.
type Replace struct {
	Name string `yaml:"name"`
}

type unitInfo struct {
	d  time.Duration
	pb pb.RateLimitResponse_RateLimit_Unit
}

var units = map[string]unitInfo{
	"second": {time.Second, pb.RateLimitResponse_RateLimit_SECOND},
	"minute": {time.Minute, pb.RateLimitResponse_RateLimit_MINUTE},
	"hour":   {time.Hour, pb.RateLimitResponse_RateLimit_HOUR},
	"day":    {24 * time.Hour, pb.RateLimitResponse_RateLimit_DAY},
	"week":   {7 * 24 * time.Hour, pb.RateLimitResponse_RateLimit_WEEK},
	"month":  {30 * 24 * time.Hour, pb.RateLimitResponse_RateLimit_MONTH},
	"year":   {365 * 24 * time.Hour, pb.RateLimitResponse_RateLimit_YEAR},
}

const unitList = "second, minute, hour, day, week, month or year"

// unitOf returns the unit named s (any case, as envoyproxy/ratelimit).
func unitOf(s string) (unitInfo, bool) {
	u, ok := units[strings.ToLower(s)]
	return u, ok
}

// pbUnit returns the window of an Envoy unit.
func pbUnit(u pb.RateLimitResponse_RateLimit_Unit) (unitInfo, bool) {
	for _, v := range units {
		if v.pb == u {
			return v, true
		}
	}
	return unitInfo{}, false
}

// rateGCRA returns the bucket of rpu (>= 1) per window: burst rpu, refilled
// over the window, or why Bulwark cannot enforce it. The message names
// the rate in the configuration's terms.
func rateGCRA(rpu uint32, unit string, window time.Duration) (limit.GCRA, string) {
	// The emission interval is window/rpu rounded down, so that rpu
	// intervals never exceed the window (a year is within
	// limit.MaxRefill).
	t := window / time.Duration(rpu)
	g := limit.GCRA{Rate: float64(time.Second) / float64(t), Burst: int64(rpu)}
	switch {
	case window > limit.MaxRefill:
		return g, fmt.Sprintf("unit %s is not supported: Bulwark's buckets refill within at most %d days (use unit: month with a twelfth of the requests)", unit, limit.MaxRefill/(24*time.Hour))
	case t == 0 || g.Rate > global.MaxRate || g.Burst > limit.MaxBurst:
		return g, fmt.Sprintf("%d per %s is above the fastest rate Bulwark enforces, %d per second and %d at once", rpu, unit, int64(global.MaxRate), int64(limit.MaxBurst))
	case g.Interval() == 0 || g.Validate() != nil:
		least := uint32(math.Ceil(float64(window) / float64(limit.Year)))
		return g, fmt.Sprintf("%d per %s is below the slowest rate Bulwark enforces, 1 per year: use at least %d per %s", rpu, unit, least, unit)
	}
	return g, ""
}

// ParseConfig reads one configuration file: one or more YAML documents,
// one domain (or the settings) each, strictly (unknown keys are errors,
// as in envoyproxy/ratelimit). Errors are [*ConfigError]s naming the
// line and the key.
func ParseConfig(data []byte) ([]DomainConfig, error) {
	return parseFiles([]file{{data: data}})
}

// file is one configuration file; name is "" for a single file.
type file struct {
	name string
	data []byte
}

// parseFiles parses files in order, merges domains when the settings say
// so, and validates the result.
func parseFiles(files []file) ([]DomainConfig, error) {
	total := 0
	for _, f := range files {
		total += len(f.data)
	}
	if total > MaxConfigBytes {
		return nil, &ConfigError{Msg: fmt.Sprintf("config larger than %d bytes", MaxConfigBytes)}
	}
	p := &parser{lines: map[string]pos{}}
	var docs []DomainConfig
	for _, f := range files {
		p.file = f.name
		dec := yaml.NewDecoder(bytes.NewReader(f.data))
		for i := 1; ; i++ {
			var n yaml.Node
			err := dec.Decode(&n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, &ConfigError{File: f.name, Doc: i, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
			}
			p.doc = i
			d, err := p.document(&n)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d)
			if len(docs) > MaxDomains+1 {
				return nil, &ConfigError{File: f.name, Doc: i, Msg: fmt.Sprintf("more than %d domains", MaxDomains)}
			}
		}
	}
	out, _ := mergeDomains(docs)
	err := Validate(out)
	var ce *ConfigError
	if errors.As(err, &ce) && ce.Line == 0 && ce.Domain != "" {
		// The key's line, else its closest parent's (a missing key).
		for path := ce.Path; ; {
			if at, ok := p.lines[ce.Domain+"\x00"+path]; ok {
				ce.File, ce.Line = at.file, at.line
				break
			}
			i := strings.LastIndexAny(path, ".[")
			if i < 0 {
				break
			}
			path = path[:i]
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// mergeDomains applies Settings.MergeDomains: the descriptors of a domain
// defined again are appended to its first definition (duplicates among
// them are then refused by Validate, as envoyproxy/ratelimit refuses
// them). Without it the documents are returned as they are.
func mergeDomains(docs []DomainConfig) ([]DomainConfig, error) {
	merge := false
	for _, d := range docs {
		if d.Settings != nil && d.Settings.MergeDomains {
			merge = true
		}
	}
	if !merge {
		return docs, nil
	}
	var out []DomainConfig
	at := map[string]int{}
	for _, d := range docs {
		if i, ok := at[d.Domain]; ok && d.Settings == nil {
			out[i].Descriptors = append(out[i].Descriptors, d.Descriptors...)
			continue
		}
		if d.Settings == nil {
			at[d.Domain] = len(out)
		}
		out = append(out, d)
	}
	return out, nil
}

// Validate checks domains: names, values, units, rates Bulwark can
// enforce, bounds, duplicates. Errors are [*ConfigError]s.
func Validate(domains []DomainConfig) error {
	domains, _ = mergeDomains(domains)
	if len(domains) > MaxDomains+1 {
		return &ConfigError{Msg: fmt.Sprintf("more than %d domains", MaxDomains)}
	}
	seen := map[string]bool{}
	settings := false
	total := 0
	for i, d := range domains {
		if d.Settings != nil {
			if d.Domain != "" || len(d.Descriptors) > 0 {
				return &ConfigError{Domain: d.Domain, Doc: i + 1, Path: "settings", Msg: "belongs in a document of its own, without domain or descriptors"}
			}
			if settings {
				return &ConfigError{Doc: i + 1, Path: "settings", Msg: "defined twice"}
			}
			settings = true
			continue
		}
		if err := checkName(d.Domain); err != "" {
			return &ConfigError{Doc: i + 1, Path: "domain", Msg: err}
		}
		if seen[d.Domain] {
			return &ConfigError{Domain: d.Domain, Msg: "defined twice (merge_domains in the settings merges them)"}
		}
		seen[d.Domain] = true
		if len(seen) > MaxDomains {
			return &ConfigError{Msg: fmt.Sprintf("more than %d domains", MaxDomains)}
		}
		if err := validateNodes(d.Domain, "", d.Descriptors, 1, &total); err != nil {
			return err
		}
	}
	return nil
}

func validateNodes(domain, path string, ds []Descriptor, depth int, total *int) error {
	if depth > MaxDepth && len(ds) > 0 {
		return &ConfigError{Domain: domain, Path: path + "descriptors", Msg: fmt.Sprintf("nested deeper than %d", MaxDepth)}
	}
	seen := map[string]int{}
	for i, d := range ds {
		here := fmt.Sprintf("%sdescriptors[%d]", path, i)
		fail := func(sub, msg string, args ...any) error {
			p := here
			if sub != "" {
				p += "." + sub
			}
			return &ConfigError{Domain: domain, Path: p, Msg: fmt.Sprintf(msg, args...)}
		}
		*total++
		if *total > MaxDescriptors {
			return fail("", "more than %d descriptors in all", MaxDescriptors)
		}
		if err := checkName(d.Key); err != "" {
			return fail("key", "%s", err)
		}
		if len(d.Value) > MaxValueLen || strings.ContainsFunc(d.Value, isControl) {
			return fail("value", "must be at most %d bytes without control characters", MaxValueLen)
		}
		if j, ok := seen[d.Key+"\x00"+d.Value]; ok {
			return fail("", "same key and value as %sdescriptors[%d] (%s)", path, j, keyValue(d))
		}
		seen[d.Key+"\x00"+d.Value] = i
		if d.ShareThreshold && !strings.HasSuffix(d.Value, "*") {
			return fail("share_threshold", "applies only to a value ending in '*'")
		}
		if d.ValueToMetric {
			return fail("value_to_metric", "not supported: it names statistics after the values of the requests' descriptors, which clients choose, and Bulwark keeps client values out of metrics (remove it: no limit depends on it)")
		}
		if r := d.RateLimit; r != nil {
			u, ok := unitOf(r.Unit)
			switch {
			case r.Unlimited && ok:
				return fail("rate_limit.unit", "must not be set when unlimited is true")
			case r.Unlimited:
			case !ok:
				return fail("rate_limit.unit", "%q is not a unit: %s", r.Unit, unitList)
			case r.RequestsPerUnit > 0:
				if _, msg := rateGCRA(r.RequestsPerUnit, strings.ToLower(r.Unit), u.d); msg != "" {
					return fail("rate_limit", "%s", msg)
				}
			}
			if r.Name != "" {
				if err := checkName(r.Name); err != "" {
					return fail("rate_limit.name", "%s", err)
				}
			}
			if len(r.Replaces) > MaxReplaces {
				return fail("rate_limit.replaces", "more than %d names", MaxReplaces)
			}
			for j, rp := range r.Replaces {
				switch {
				case rp.Name == "":
					return fail(fmt.Sprintf("rate_limit.replaces[%d].name", j), "must not be empty")
				case rp.Name == r.Name:
					return fail(fmt.Sprintf("rate_limit.replaces[%d].name", j), "%q is this limit's own name", rp.Name)
				}
				if err := checkName(rp.Name); err != "" {
					return fail(fmt.Sprintf("rate_limit.replaces[%d].name", j), "%s", err)
				}
			}
		}
		if err := validateNodes(domain, here+".", d.Descriptors, depth+1, total); err != nil {
			return err
		}
	}
	return nil
}

func keyValue(d Descriptor) string {
	if d.Value == "" {
		return "key " + strconv.Quote(d.Key)
	}
	return "key " + strconv.Quote(d.Key) + ", value " + strconv.Quote(d.Value)
}

func checkName(s string) string {
	if s == "" || len(s) > MaxNameLen || strings.ContainsFunc(s, isControl) {
		return fmt.Sprintf("must be 1 to %d bytes without control characters", MaxNameLen)
	}
	return ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
