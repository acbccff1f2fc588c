package proxyproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzParse feeds hostile bytes to Parse and Read. Properties: neither
// panics; Parse's length is within the input and the bounds, and the
// header it found parses the same alone; Read agrees with Parse on
// every input that Parse decides (same header, or an error both), and
// consumes exactly the header's bytes.
//
// Seed corpus: testdata/fuzz/FuzzParse. Run it:
//
//	go test -run '^$' -fuzz FuzzParse -fuzztime 60s -fuzzminimizetime 2s ./proxyproto
//
// (On a loaded machine the default minimization of a large interesting
// input, up to a minute, shows as executions stalled at 0/sec.)
func FuzzParse(f *testing.F) {
	for _, c := range validCases() {
		f.Add(c.in)
	}
	buf := make([]byte, MaxHeader)
	f.Fuzz(func(t *testing.T, in []byte) {
		h, n, err := Parse(in)
		if err == nil {
			if n <= 0 || n > len(in) || n > MaxHeader || h.Version < 1 || h.Version > 2 {
				t.Fatalf("Parse: %+v n=%d of %d", h, n, len(in))
			}
			if h.Local != !h.Src.IsValid() {
				t.Fatalf("Parse: local %v with source %v", h.Local, h.Src)
			}
			if h2, n2, err2 := Parse(in[:n]); err2 != nil || h2 != h || n2 != n {
				t.Fatalf("the header alone: %+v %d %v, want %+v %d", h2, n2, err2, h, n)
			}
		}
		r := bytes.NewReader(in)
		rh, rerr := Read(r, buf)
		switch {
		case err == nil:
			if rerr != nil || rh != h {
				t.Fatalf("Read: %+v %v; Parse: %+v", rh, rerr, h)
			}
			if rest, _ := io.ReadAll(r); !bytes.Equal(rest, in[n:]) {
				t.Fatalf("Read left %d bytes, want %d", len(rest), len(in)-n)
			}
		case errors.Is(err, ErrIncomplete):
			if rerr == nil {
				t.Fatalf("Read found %+v in an incomplete header", rh)
			}
		default:
			if rerr == nil {
				t.Fatalf("Read found %+v where Parse says %v", rh, err)
			}
		}
	})
}
