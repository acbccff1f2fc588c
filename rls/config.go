package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Bounds on configurations and requests.
const (
	MaxDomains        = 256
	MaxDescriptors    = 10_000 // configured descriptor nodes, all domains
	MaxDepth          = 8      // nesting of configured descriptors
	MaxConfigBytes    = 1 << 20
	MaxNameLen        = 128 // domain, key, limit name
	MaxValueLen       = 256 // configured and requested values
	MaxReqDescriptors = 64  // descriptors in one request
	MaxReqEntries     = 16  // entries in one request descriptor
	MaxHits           = 1_000_000
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("rls: invalid config")

// DomainConfig is one domain's rate limits, in envoyproxy/ratelimit's
// format:
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
}

// Descriptor is one node of a domain's tree. A node without Value matches
// any value of Key, each distinct value counted separately; a Value ending
// in '*' matches values with that prefix; any other Value matches exactly
// and wins over the other two.
type Descriptor struct {
	Key         string       `yaml:"key"`
	Value       string       `yaml:"value"`
	RateLimit   *RateLimit   `yaml:"rate_limit"`
	ShadowMode  bool         `yaml:"shadow_mode"`
	Descriptors []Descriptor `yaml:"descriptors"`
	// DetailedMetric is accepted for compatibility and ignored.
	DetailedMetric bool `yaml:"detailed_metric"`
}

// RateLimit is a node's limit: RequestsPerUnit per Unit (second, minute,
// hour, day or week), enforced as GCRA with that rate and a burst of
// RequestsPerUnit (envoyproxy/ratelimit counts fixed windows instead).
// Unlimited exempts the node.
type RateLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
	// Name names the limit in RateLimit-Policy fields; printable ASCII
	// without quotes or backslashes. Empty: the descriptor's key path.
	Name string `yaml:"name"`
}

var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
}

// ParseConfig reads one or more YAML documents, one domain each, strictly
// (unknown fields are errors). Errors name the document and the field.
func ParseConfig(data []byte) ([]DomainConfig, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("%w: config larger than %d bytes", ErrConfig, MaxConfigBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []DomainConfig
	for i := 1; ; i++ {
		var d DomainConfig
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %v", ErrConfig, i, err)
		}
		out = append(out, d)
		if len(out) > MaxDomains {
			return nil, fmt.Errorf("%w: more than %d domains", ErrConfig, MaxDomains)
		}
	}
	if err := Validate(out); err != nil {
		return nil, err
	}
	return out, nil
}

// Validate checks domains: names, values, units, bounds, duplicates.
func Validate(domains []DomainConfig) error {
	if len(domains) > MaxDomains {
		return fmt.Errorf("%w: more than %d domains", ErrConfig, MaxDomains)
	}
	seen := map[string]bool{}
	total := 0
	for _, d := range domains {
		if err := checkName("domain", d.Domain); err != nil {
			return err
		}
		if seen[d.Domain] {
			return fmt.Errorf("%w: domain %q defined twice", ErrConfig, d.Domain)
		}
		seen[d.Domain] = true
		if err := validateNodes(d.Domain, d.Descriptors, 1, &total); err != nil {
			return err
		}
	}
	return nil
}

func validateNodes(path string, ds []Descriptor, depth int, total *int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: %s: descriptors nested deeper than %d", ErrConfig, path, MaxDepth)
	}
	seen := map[string]bool{}
	for _, d := range ds {
		*total++
		if *total > MaxDescriptors {
			return fmt.Errorf("%w: more than %d descriptors", ErrConfig, MaxDescriptors)
		}
		if err := checkName(path+": key", d.Key); err != nil {
			return err
		}
		if len(d.Value) > MaxValueLen || strings.ContainsFunc(d.Value, isControl) {
			return fmt.Errorf("%w: %s.%s: value longer than %d bytes or with control characters", ErrConfig, path, d.Key, MaxValueLen)
		}
		here := path + "." + d.Key
		if d.Value != "" {
			here += "=" + d.Value
		}
		if seen[d.Key+"\x00"+d.Value] {
			return fmt.Errorf("%w: %s defined twice", ErrConfig, here)
		}
		seen[d.Key+"\x00"+d.Value] = true
		if r := d.RateLimit; r != nil && !r.Unlimited {
			if _, ok := units[strings.ToLower(r.Unit)]; !ok {
				return fmt.Errorf("%w: %s: rate_limit.unit %q must be second, minute, hour, day or week", ErrConfig, here, r.Unit)
			}
			if r.RequestsPerUnit < 1 {
				return fmt.Errorf("%w: %s: rate_limit.requests_per_unit must be at least 1", ErrConfig, here)
			}
		}
		if r := d.RateLimit; r != nil && r.Name != "" {
			if err := checkName(here+": rate_limit.name", r.Name); err != nil {
				return err
			}
			if strings.ContainsAny(r.Name, `"\`) {
				return fmt.Errorf("%w: %s: rate_limit.name must not contain quotes or backslashes", ErrConfig, here)
			}
		}
		if err := validateNodes(here, d.Descriptors, depth+1, total); err != nil {
			return err
		}
	}
	return nil
}

func checkName(what, s string) error {
	if s == "" || len(s) > MaxNameLen || strings.ContainsFunc(s, isControl) {
		return fmt.Errorf("%w: %s must be 1 to %d bytes without control characters", ErrConfig, what, MaxNameLen)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
