package tracectx

import (
	"strings"
	"testing"
)

const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParse(t *testing.T) {
	p, ok := Parse(valid)
	if !ok || !p.Sampled() || p.TraceID[0] != 0x4b || p.SpanID[7] != 0xb7 {
		t.Fatalf("Parse(%q) = %+v, %v", valid, p, ok)
	}
	if got := string(Append(nil, p.TraceID, p.SpanID, p.Flags)); got != valid {
		t.Errorf("Append = %q, want %q", got, valid)
	}
	for _, c := range []struct {
		v  string
		ok bool
	}{
		{valid, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},
		{valid + "-more", false}, // version 00 is exactly 55 bytes
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false},
		{valid[:54], false},
		{"", false},
		{strings.Repeat("-", 55), false},
	} {
		if Valid(c.v) != c.ok || Valid([]byte(c.v)) != c.ok {
			t.Errorf("Valid(%q) = %v, want %v", c.v, !c.ok, c.ok)
		}
	}
}

func TestNoRaceParseAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not meaningful under -race")
	}
	b := []byte(valid)
	if n := testing.AllocsPerRun(100, func() { Parse(b) }); n != 0 {
		t.Errorf("Parse: %v allocations", n)
	}
}

// FuzzParse: a parsed traceparent written back is valid and parses to
// the same value; nothing panics.
func FuzzParse(f *testing.F) {
	f.Add(valid)
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, v string) {
		p, ok := Parse(v)
		if !ok {
			return
		}
		out := Append(nil, p.TraceID, p.SpanID, p.Flags)
		q, ok := Parse(out)
		if !ok || q != p || len(out) != Len {
			t.Fatalf("%q parsed to %+v, written as %q", v, p, out)
		}
	})
}
