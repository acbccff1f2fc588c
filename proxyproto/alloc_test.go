package proxyproto

import (
	"bytes"
	"testing"
)

// Parsing and reading the common headers does not allocate (a TCP6 v1
// line's text addresses cost their parse).
func TestNoRaceNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	buf := make([]byte, MaxHeader)
	for _, c := range validCases() {
		if c.name == "v1 tcp6" || c.name == "v1 tcp6 shortest" {
			continue
		}
		if n := testing.AllocsPerRun(100, func() { _, _, _ = Parse(c.in) }); n != 0 {
			t.Errorf("Parse %s: %v allocations", c.name, n)
		}
		r := bytes.NewReader(nil)
		if n := testing.AllocsPerRun(100, func() {
			r.Reset(c.in)
			_, _ = Read(r, buf)
		}); n != 0 {
			t.Errorf("Read %s: %v allocations", c.name, n)
		}
	}
}
