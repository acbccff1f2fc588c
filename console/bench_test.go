package console

import (
	"fmt"
	"testing"
)

// BenchmarkSnapshot is what one second of watching costs the process (one
// snapshot computed and encoded, shared by every open stream), with a
// status of 256 rejection counters and 64 tables. With no stream open
// nothing runs at all (TestEventsCostNothingUnwatched).
func BenchmarkSnapshot(b *testing.B) {
	f := newFixture(b, nil)
	rej := make([]Rejection, 256)
	for i := range rej {
		rej[i] = Rejection{Layer: "rate_limit", Reason: fmt.Sprintf("reason%d", i%8), Route: fmt.Sprintf("route%d", i%32), Count: uint64(i)}
	}
	tables := map[string]Table{}
	for i := range 64 {
		tables[fmt.Sprintf("rate_limit/route%d", i)] = Table{Len: i, Capacity: 65536}
	}
	f.c.cfg.Status = func() Status { return Status{Version: "bench", State: "ready", Rejections: rej} }
	f.c.cfg.Tables = func() map[string]Table { return tables }
	b.ReportAllocs()
	for b.Loop() {
		f.c.snap.body = nil // force a computation
		if body, _ := f.c.snapshot(f.clk.Now()); body == nil {
			b.Fatal("no snapshot")
		}
	}
}
