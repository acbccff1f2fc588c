package conf_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
)

var errInvalid = errors.New("pkg: invalid config")

// TestCheckCollectsEveryFieldWithItsKind: every setting out of range is
// reported, in order, with its key, its range and the package's kind.
func TestCheckCollectsEveryFieldWithItsKind(t *testing.T) {
	f := conf.Check{Kind: errInvalid}
	f.Int("max_keys", 0, 1, 10)
	f.Int("ok", 5, 1, 10)
	f.Duration("window", 90*time.Minute, time.Second, time.Hour)
	f.Float("share", math.NaN(), 0, 1)
	f.OneOf("mode", "loud", "enforce", "shadow")
	f.WholeMillis("ttl", 1500*time.Microsecond)
	err := f.Err()
	var es conf.Errors
	if !errors.As(err, &es) || len(es) != 5 {
		t.Fatalf("got %v", err)
	}
	want := []string{
		"max_keys: 0 out of range [1, 10]",
		"window: 1h30m out of range [1s, 1h]",
		"share: NaN out of range [0, 1]",
		`mode: "loud": want enforce or shadow`,
		"ttl: 1.5ms is not a whole number of milliseconds",
	}
	for i, e := range es {
		if got := e.Path + ": " + e.Msg; got != want[i] {
			t.Errorf("error %d: got %q, want %q", i, got, want[i])
		}
	}
	if !errors.Is(err, errInvalid) {
		t.Error("errors.Is does not find the kind")
	}
	if got := err.Error(); got != "pkg: invalid config: max_keys: 0 out of range [1, 10]; window: 1h30m out of range [1s, 1h]; share: NaN out of range [0, 1]; mode: \"loud\": want enforce or shadow; ttl: 1.5ms is not a whole number of milliseconds" {
		t.Errorf("Error() = %q", got)
	}
}

// TestSubNestsPathsAndKeepsKinds: a nested value's errors get the
// prefix and keep their own kind; a plain error lands at the prefix.
func TestSubNestsPathsAndKeepsKinds(t *testing.T) {
	inner := conf.Check{Kind: errInvalid}
	inner.Int("qps", -1, 0, 5)
	inner.Add("", "whole value wrong")
	var outer conf.Check
	outer.Sub("routes[0].rate_limit", inner.Err())
	outer.Sub(conf.Index("targets", 2), errors.New("bad URL"))
	outer.Sub("nothing", nil)
	es := outer.List()
	if len(es) != 3 {
		t.Fatalf("got %v", es)
	}
	if es[0].Path != "routes[0].rate_limit.qps" || es[1].Path != "routes[0].rate_limit" || es[2].Path != "targets[2]" {
		t.Errorf("paths %q %q %q", es[0].Path, es[1].Path, es[2].Path)
	}
	if es[0].Kind != errInvalid || es[2].Kind != nil {
		t.Errorf("kinds %v %v", es[0].Kind, es[2].Kind)
	}
	if es[2].Msg != "bad URL" {
		t.Errorf("msg %q", es[2].Msg)
	}
	var ok conf.Check
	if !ok.OK() || ok.Err() != nil {
		t.Error("an empty check reports an error")
	}
}

func TestJoinAndFormat(t *testing.T) {
	for _, c := range [][3]string{{"", "a", "a"}, {"a", "", "a"}, {"a", "b", "a.b"}, {"a", "[1]", "a[1]"}} {
		if got := conf.Join(c[0], c[1]); got != c[2] {
			t.Errorf("Join(%q, %q) = %q", c[0], c[1], got)
		}
	}
	if got := conf.FormatDuration(2 * time.Hour); got != "2h" {
		t.Errorf("FormatDuration = %q", got)
	}
	if got := conf.FormatDuration(90 * time.Second); got != "1m30s" {
		t.Errorf("FormatDuration = %q", got)
	}
	if got := conf.FormatFloat(1e6); got != "1000000" {
		t.Errorf("FormatFloat = %q", got)
	}
	if got := conf.Alternatives([]string{"a", "b", "c"}); got != "a, b or c" {
		t.Errorf("Alternatives = %q", got)
	}
}

// A layer's configuration validates itself with a Check; the caller
// nests it under its own key.
func ExampleCheck() {
	type Config struct {
		MaxKeys int           `yaml:"max_keys"`
		Window  time.Duration `yaml:"window"`
	}
	validate := func(c Config) error {
		f := conf.Check{Kind: errInvalid}
		f.Int("max_keys", int64(c.MaxKeys), 1, 1_000_000)
		f.Duration("window", c.Window, time.Second, 24*time.Hour)
		return f.Err()
	}
	var top conf.Check
	top.Sub("routes[0].login", validate(Config{MaxKeys: 0, Window: time.Minute}))
	for _, e := range top.List() {
		fmt.Println(e.Path+":", e.Msg)
	}
	// Output:
	// routes[0].login.max_keys: 0 out of range [1, 1000000]
}

// TestNameAndRedactURL: Name takes 1 to 64 of a-z 0-9 . _ - and
// Check.Name says so; RedactURL drops user info and cuts long values.
func TestNameAndRedactURL(t *testing.T) {
	for s, want := range map[string]bool{"app": true, "a.b_c-9": true, strings.Repeat("a", 64): true,
		"": false, strings.Repeat("a", 65): false, "App": false, "a b": false, "a/b": false} {
		if conf.Name(s) != want {
			t.Errorf("Name(%q) = %v", s, !want)
		}
	}
	var f conf.Check
	f.Name("name", "App")
	if err := f.Err(); err == nil || err.Error() != `name: "App": want 1 to 64 of a-z 0-9 . _ -` {
		t.Errorf("Check.Name: %v", err)
	}
	for in, want := range map[string]string{
		"http://u:secret@h:1/p":                    "http://h:1/p",
		"http://h/" + strings.Repeat("x", 300):     "http://h/" + strings.Repeat("x", 191) + "…",
		"http://u:p@h/" + strings.Repeat("x", 300): "http://h/" + strings.Repeat("x", 191) + "…",
	} {
		if got := conf.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
