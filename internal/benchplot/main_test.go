package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const peersSample = `date: 2026-12-01_202553Z
goversion: go1.26.8
ncpu: 2
count: 3
cpu: AMD EPYC
BenchmarkHotKey/peer=bulwark-2         	12175335	        98.53 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotKey/peer=bulwark-2         	12482415	        96.28 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotKey/peer=bulwark-2         	12360775	        97.87 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotKey/peer=xrate-syncmap-2   	13309771	        98.91 ns/op	       0 B/op	       0 allocs/op
BenchmarkHeap1M/peer=bulwark-2         	       1	         7.398 heap-MiB	         7.736 live-B/key	       383.0 ns/insert
BenchmarkOvershoot/mode=flood/peer=bulwark-2 	       1	       100.0 allowed	     10000 calls
`

const gatewaySample = `# Gateway benchmark — 2026-12-01_203302Z

- host: Linux 6.18 x86_64, 2 CPUs (AMD EPYC)
- load: wrk -t1 -c{50} -d10s --latency

## HTTP/1.1, 50 connections (median of 3 runs)

| config | req/s | spread | p50 | p99 | × direct | × goproxy | proxy CPU µs/req | new upstream conns | CPU busy % | errors |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| direct | 151318 | 5.6% | 157 µs | 695 µs | 1.00 | 10.18 | — | 51 | 99/99 | 0 |
| nginx-limitreq | 46749 | 5.6% | 882 µs | 1.96 ms | 0.31 | 3.15 | 14.5 | 0 | 99/42 | 0 |
| bulwark-on | 16438 | 11.9% | 2.98 ms | 7.30 ms | 0.11 | 1.11 | 48.5 | 0 | 99/33 | 0 |

### req/s of every run, in run order

| config | run 1 | run 2 | run 3 |
|---|---:|---:|---:|
| direct | 148713 | 151318 | 157201 |
`

// TestFigures: the medians and names come out of both result formats,
// Bulwark's bars are marked, and the source is named in the figure.
func TestFigures(t *testing.T) {
	figs, err := peerFigures(peersSample, "2026-12-01_202553Z.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 2 || figs[0].name != "peers-2026-12-01_202553Z-speed.svg" || figs[1].name != "peers-2026-12-01_202553Z-memory.svg" {
		t.Fatalf("figures %v", names(figs))
	}
	speed := figs[0].svg
	for _, want := range []string{">97.9<", ">98.9<", bulwarkColor, "2026-12-01_202553Z.txt", "median of 3 runs"} {
		if !strings.Contains(speed, want) {
			t.Errorf("speed figure lacks %q", want)
		}
	}
	if strings.Contains(speed, "Overshoot") || !strings.Contains(figs[1].svg, ">7.40<") {
		t.Errorf("the speed figure shows a sub-benchmark, or the memory figure lacks the heap median")
	}

	figs, err = gatewayFigures(gatewaySample, "2026-12-01_203302Z.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 1 || figs[0].name != "gateway-2026-12-01_203302Z-c50.svg" {
		t.Fatalf("figures %v", names(figs))
	}
	g := figs[0].svg
	for _, want := range []string{">151318<", ">16438<", ">48.5<", ">14.5<", "AMD EPYC"} {
		if !strings.Contains(g, want) {
			t.Errorf("gateway figure lacks %q", want)
		}
	}
	if strings.Count(g, ">direct<") != 1 { // no CPU bar for direct ("—"), and the per-run table is not read
		t.Errorf("direct appears %d times", strings.Count(g, ">direct<"))
	}
	if _, err := gatewayFigures("# nothing\n", "x.md"); err == nil {
		t.Error("a report without a table: no error")
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "2026-12-01_202553Z.txt")
	if err := os.WriteFile(in, []byte(peersSample), 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if err := run(filepath.Join(dir, "img"), []string{in}, &log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "img", "peers-2026-12-01_202553Z-speed.svg")); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, []string{filepath.Join(dir, "x.csv")}, &log); err == nil {
		t.Error("a missing file: no error")
	}
}

func names(fs []figure) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.name)
	}
	return out
}
