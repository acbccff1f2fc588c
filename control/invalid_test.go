package control_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/wire"
)

// TestInvalidFields: the detail names every invalid key, with messages
// when they fit, else the keys, else the keys without indices; an error
// naming no field keeps the code's fixed detail.
func TestInvalidFields(t *testing.T) {
	kind := errors.New("pkg: invalid configuration")
	check := func(paths ...string) error {
		f := conf.Check{Kind: kind}
		for _, p := range paths {
			f.Add(p, "%s", strings.Repeat("x", 30))
		}
		return f.Err()
	}
	many := make([]string, 20)
	for i := range many {
		many[i] = fmt.Sprintf("names[%d]", i)
	}
	for _, c := range []struct {
		err    error
		detail string
	}{
		{check("k"), "k: " + strings.Repeat("x", 30) + "."},
		{check("a", "b", "c", "d"), "Invalid: a, b, c, d."},
		{check(append(many, "k")...), "Invalid: names, k."},
		{(check("k").(conf.Errors))[0], "k: " + strings.Repeat("x", 30) + "."},
		{errors.New("no field"), ""},
	} {
		e := control.InvalidFields(c.err)
		if e.Code != wire.CodeInvalidRequest || e.Detail != c.detail || e.Err == nil || e.Err.Error() != c.err.Error() {
			t.Errorf("InvalidFields(%v) = %+v, want detail %q", c.err, e, c.detail)
		}
	}
}

// TestInvalidFieldsAs: renamed keys name the request's members, indices
// kept, in every form of the detail; err is kept unchanged.
func TestInvalidFieldsAs(t *testing.T) {
	f := conf.Check{Kind: errors.New("pkg: invalid configuration")}
	f.Add("k", "0.1 out of range [0.5, 20]")
	f.Add("flags[2]", "bad")
	f.Add("x", "kept")
	err := f.Err()
	e := control.InvalidFieldsAs(err, map[string]string{"k": "sigma_multiplier", "flags": "bits"})
	if want := "sigma_multiplier: 0.1 out of range [0.5, 20]; bits[2]: bad; x: kept."; e.Detail != want || e.Err == nil || e.Err.Error() != err.Error() {
		t.Errorf("detail %q, want %q", e.Detail, want)
	}
	if !strings.Contains(err.Error(), "k: 0.1") {
		t.Errorf("err changed: %v", err)
	}
}
