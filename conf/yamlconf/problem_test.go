package yamlconf

import (
	"testing"
)

func TestProblemString(t *testing.T) {
	for _, tc := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "b.yaml", Line: 3, Path: "a.b", Msg: "bad"}, "b.yaml:3: a.b: bad"},
		{Problem{File: "b.yaml", Msg: "cannot read: x"}, "b.yaml: cannot read: x"},
		{Problem{Path: "BULWARK_PROFILE", Msg: "bad"}, "environment: BULWARK_PROFILE: bad"},
		// A Config built in Go has no file.
		{Problem{Path: "routes[0].name", Msg: "bad"}, "routes[0].name: bad"},
		{Problem{Msg: "bad"}, "bad"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("got %q want %q", got, tc.want)
		}
	}
}
