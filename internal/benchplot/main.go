// Command benchplot turns benchmark results into the SVG figures of
// docs/benchmarks.md. It is a development tool, not part of the gateway:
// run it through scripts/plot.
//
//	go run ./internal/benchplot -out docs/img RESULTS...
//
// Each RESULTS file is one of:
//
//   - the peers harness's raw `go test -bench` output (results/DATE.txt):
//     peers-DATE-speed.svg (median ns/op per scenario and peer) and, when
//     the run measured it, peers-DATE-memory.svg (heap after 1M keys);
//   - the gateways harness's report (results/DATE.md): gateway-DATE-cN.svg
//     per connection count (median req/s and proxy CPU µs per request).
//
// The figures are plain SVG written by hand (no dependency), deterministic
// for the same input, and carry the run's date, host and source file, so
// a figure never loses where it came from.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

func main() {
	out := flag.String("out", "docs/img", "directory for the SVG files")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchplot [-out DIR] RESULTS...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, flag.Args(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

func run(outDir string, inputs []string, log io.Writer) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, in := range inputs {
		data, err := os.ReadFile(in)
		if err != nil {
			return err
		}
		var figs []figure
		switch {
		case strings.HasSuffix(in, ".txt"):
			figs, err = peerFigures(string(data), filepath.Base(in))
		case strings.HasSuffix(in, ".md"):
			figs, err = gatewayFigures(string(data), filepath.Base(in))
		default:
			err = errors.New("want a .txt (peers) or .md (gateways) results file")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		for _, f := range figs {
			p := filepath.Join(outDir, f.name)
			if err := os.WriteFile(p, []byte(f.svg), 0o644); err != nil {
				return err
			}
			fmt.Fprintln(log, "wrote", p)
		}
	}
	return nil
}

type figure struct{ name, svg string }

// --- peers: go test -bench output --------------------------------------------

var benchLine = regexp.MustCompile(`^Benchmark([A-Za-z0-9]+)(/[^\s]*)?/peer=([^\s]+?)(-\d+)?\s+\d+\s+(.*)$`)

// peerFigures reads raw benchmark lines: the median of every (scenario,
// peer, unit).
func peerFigures(text, source string) ([]figure, error) {
	meta := map[string]string{}
	samples := map[[3]string][]float64{} // scenario, peer, unit
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, "Benchmark") && !strings.Contains(k, " ") {
			meta[k] = v
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		scenario := m[1] + m[2]
		f := strings.Fields(m[5])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			k := [3]string{scenario, m[3], f[i+1]}
			samples[k] = append(samples[k], v)
		}
	}
	if len(samples) == 0 {
		return nil, errors.New("no benchmark lines")
	}
	date := meta["date"]
	if date == "" {
		date = strings.TrimSuffix(source, ".txt")
	}
	sub := fmt.Sprintf("%s · %s CPUs (%s) · %s · median of %s runs · %s", date, meta["ncpu"], meta["cpu"], meta["goversion"], meta["count"], source)

	var figs []figure
	speed := map[string]map[string]float64{}
	mem := map[string]map[string]float64{}
	for k, vs := range samples {
		switch {
		case k[2] == "ns/op" && !strings.Contains(k[0], "/"):
			put(speed, k[0], k[1], median(vs))
		case k[2] == "heap-MiB":
			put(mem, "heap after 1M keys", k[1], median(vs))
		}
	}
	order := []string{"HotKey", "HotKeyParallel", "Uniform10k", "Churn"}
	if len(speed) > 0 {
		figs = append(figs, figure{"peers-" + date + "-speed.svg", barChart(chart{
			title:    "Keyed rate limiters: time per decision (lower is better)",
			subtitle: sub,
			unit:     "ns/op",
			groups:   orderedKeys(speed, order),
			data:     speed,
		})})
	}
	if len(mem) > 0 {
		figs = append(figs, figure{"peers-" + date + "-memory.svg", barChart(chart{
			title:    "Keyed rate limiters: heap after 1M distinct keys (lower is better)",
			subtitle: sub,
			unit:     "MiB",
			groups:   orderedKeys(mem, nil),
			data:     mem,
		})})
	}
	return figs, nil
}

// --- gateways: the harness's markdown report -----------------------------------

var (
	gatewaySection = regexp.MustCompile(`^## HTTP/1\.1, (\d+) connections`)
	gatewayTitle   = regexp.MustCompile(`^# Gateway benchmark — (\S+)`)
)

// gatewayFigures reads the median table of each connection count.
func gatewayFigures(text, source string) ([]figure, error) {
	date, host, load := strings.TrimSuffix(source, ".md"), "", ""
	var figs []figure
	conns := ""
	var header []string
	rows := map[string]map[string]float64{}
	var configs []string
	flush := func() {
		if conns == "" || len(configs) == 0 {
			return
		}
		sub := fmt.Sprintf("%s · %s · %s", date, host, source)
		rps := map[string]map[string]float64{"req/s": {}}
		cpu := map[string]map[string]float64{"proxy CPU µs per request": {}}
		for _, c := range configs {
			if v, ok := rows[c]["req/s"]; ok {
				rps["req/s"][c] = v
			}
			if v, ok := rows[c]["proxy CPU µs/req"]; ok {
				cpu["proxy CPU µs per request"][c] = v
			}
		}
		svg := twoPanels(
			chart{title: "HTTP/1.1 proxies, " + conns + " connections: median req/s (higher is better)", subtitle: sub + "\n" + load, unit: "req/s", groups: []string{"req/s"}, data: rps, series: configs},
			chart{title: "Proxy CPU time per request (lower is better)", unit: "µs", groups: []string{"proxy CPU µs per request"}, data: cpu, series: configs},
		)
		figs = append(figs, figure{fmt.Sprintf("gateway-%s-c%s.svg", date, conns), svg})
		conns, configs, rows = "", nil, map[string]map[string]float64{}
	}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case gatewayTitle.MatchString(line):
			date = gatewayTitle.FindStringSubmatch(line)[1]
		case strings.HasPrefix(line, "- host: "):
			host = strings.TrimPrefix(line, "- host: ")
		case strings.HasPrefix(line, "- load: "):
			load = strings.TrimPrefix(line, "- load: ")
		case gatewaySection.MatchString(line):
			flush()
			conns = gatewaySection.FindStringSubmatch(line)[1]
			header = nil
		case strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### "):
			flush()
		case conns != "" && strings.HasPrefix(line, "|"):
			cells := splitRow(line)
			if header == nil {
				header = cells
				continue
			}
			if strings.HasPrefix(cells[0], "---") || strings.HasPrefix(cells[0], ":") {
				continue
			}
			r := map[string]float64{}
			for i, c := range cells {
				if i == 0 || i >= len(header) {
					continue
				}
				if v, err := strconv.ParseFloat(strings.TrimSuffix(c, "%"), 64); err == nil {
					r[header[i]] = v
				}
			}
			rows[cells[0]] = r
			configs = append(configs, cells[0])
		}
	}
	flush()
	if len(figs) == 0 {
		return nil, errors.New("no \"## HTTP/1.1, N connections\" table")
	}
	return figs, nil
}

func splitRow(line string) []string {
	parts := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// --- drawing ---------------------------------------------------------------------

// chart is a grouped bar chart: one group per entry of groups, one bar per
// series (in series order, else sorted) with data[group][series].
type chart struct {
	title, subtitle, unit string
	groups                []string
	series                []string
	data                  map[string]map[string]float64
}

// palette has no red: red is Bulwark's.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f", "#bcbd22", "#17becf", "#e377c2", "#aec7e8"}

// bulwarkColor marks Bulwark's bars in every figure.
const bulwarkColor = "#c0392b"

const (
	width    = 900
	left     = 70
	right    = 20
	barH     = 18
	groupGap = 26
)

func barChart(c chart) string {
	body, h := drawChart(c, 0)
	return wrapSVG(body, h)
}

func twoPanels(a, b chart) string {
	top, h1 := drawChart(a, 0)
	bottom, h2 := drawChart(b, h1)
	return wrapSVG(top+bottom, h1+h2)
}

func wrapSVG(body string, h int) string {
	return fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
%s</svg>
`, width, h, width, h, body)
}

// drawChart draws c as horizontal bars from y0 and returns the SVG and
// the height used.
func drawChart(c chart, y0 int) (string, int) {
	series := c.series
	if series == nil {
		seen := map[string]bool{}
		for _, g := range c.groups {
			for s := range c.data[g] {
				seen[s] = true
			}
		}
		for s := range seen {
			series = append(series, s)
		}
		sort.Strings(series)
	}
	labelW := 170
	maxV := 0.0
	for _, g := range c.groups {
		for _, v := range c.data[g] {
			maxV = max(maxV, v)
		}
	}
	scale := niceMax(maxV)
	plotL, plotR := left+labelW, width-right-60
	var b strings.Builder
	y := y0 + 24
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", 10, y, esc(c.title))
	for _, line := range strings.Split(c.subtitle, "\n") {
		if line != "" {
			y += 18
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", 10, y, esc(line))
		}
	}
	y += 16
	axisTop := y
	for _, g := range c.groups {
		if len(c.groups) > 1 {
			y += 14
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", 10, y, esc(g))
			y += 4
		}
		for i, s := range series {
			v, ok := c.data[g][s]
			if !ok {
				continue
			}
			color := palette[i%len(palette)]
			if strings.HasPrefix(s, "bulwark") {
				color = bulwarkColor
			}
			w := float64(plotR-plotL) * v / scale
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", plotL-6, y+barH-5, esc(s))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", plotL, y, w, barH-2, color)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(plotL)+w+4, y+barH-5, esc(formatValue(v)))
			y += barH
		}
		y += groupGap - 14
	}
	// Axis: 0 .. scale in 5 ticks.
	for i := 0; i <= 5; i++ {
		x := float64(plotL) + float64(plotR-plotL)*float64(i)/5
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, axisTop, x, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", x, y+14, esc(strconv.FormatFloat(scale*float64(i)/5, 'g', -1, 64)))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" fill="#555">%s</text>`+"\n", plotR, y+30, esc(c.unit))
	return b.String(), y + 44 - y0
}

// niceMax rounds v up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatValue(v float64) string {
	switch {
	case v >= 10000:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func esc(s string) string { return html.EscapeString(s) }

func put(m map[string]map[string]float64, g, s string, v float64) {
	if m[g] == nil {
		m[g] = map[string]float64{}
	}
	m[g][s] = v
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// orderedKeys returns m's keys, those in order first (in that order), the
// rest sorted.
func orderedKeys(m map[string]map[string]float64, order []string) []string {
	var out []string
	for _, k := range order {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	var rest []string
	for k := range m {
		if !slices.Contains(out, k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}
