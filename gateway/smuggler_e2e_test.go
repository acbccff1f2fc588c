package gateway

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// defparam/smuggler's Transfer-Encoding mutations (testdata/smuggler,
// MIT), replayed on every engine against a logging upstream, with
// smuggler's four probes each: TE.CL and CL.TE, with the Content-Length
// that times out a desynchronized pair and the one that does not.
// Properties:
//   - framing: the requests the upstream receives from one connection
//     are a prefix of the requests net/http's parser (http.ReadRequest)
//     reads from the same bytes, bodies included: the gateway never
//     frames a body otherwise, and may only refuse earlier;
//   - decisions: every request the upstream received is one the gateway
//     decided to forward (an access log line naming the upstream): none
//     reached the upstream behind the gateway's back.
// Connection persistence is not compared (Content-Length with
// Transfer-Encoding closes the connection; net/http's parser alone
// reads on).

type smugglerMutation struct {
	name   string
	header string // smuggler's template: __METHOD__, __ENDPOINT__, __RANDOM__, __HOST__, __REPLACE_CL__
}

// loadSmuggler reads testdata/smuggler/mutations.txt. A mutation holding
// characters from U+0080 to U+00FF (sent UTF-8-encoded by smuggler) is
// also returned with them as single raw bytes, as the configs mean.
func loadSmuggler(t testing.TB) []smugglerMutation {
	data, err := os.ReadFile("testdata/smuggler/mutations.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []smugglerMutation
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, hx, ok := strings.Cut(line, "\t")
		b, err := hex.DecodeString(hx)
		if !ok || err != nil {
			t.Fatalf("mutations.txt: bad line %q", line)
		}
		out = append(out, smugglerMutation{name, string(b)})
		if !utf8.Valid(b) || isASCIIBytes(b) {
			continue
		}
		raw := make([]byte, 0, len(b))
		for _, r := range string(b) {
			raw = append(raw, byte(r)) // every rune is below U+0100
		}
		out = append(out, smugglerMutation{name + "~raw", string(raw)})
	}
	return out
}

func isASCIIBytes(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// smugglerProbes are smuggler.py's _check_tecl and _check_clte bodies
// and Content-Lengths (ptype 0: the timeout value; 1: the good one).
var smugglerProbes = []struct {
	name string
	cl   int
	body string
}{
	{"tecl0", 6, "0\r\n\r\nX"},
	{"tecl1", 5, "0\r\n\r\nX"},
	{"clte0", 4, "1\r\nZ\r\n0\r\n\r\n"},
	{"clte1", 11, "1\r\nZ\r\n0\r\n\r\n"},
}

// smugglerPayload renders a mutation as smuggler's Payload.__str__
// does, with the case's marker field last in the head.
func smugglerPayload(m smugglerMutation, cl int, body, id string) string {
	h := strings.NewReplacer("__METHOD__", "POST", "__ENDPOINT__", "/", "__RANDOM__", id,
		"__HOST__", "app.example", "__REPLACE_CL__", strconv.Itoa(cl)).Replace(m.header)
	return h + "X-Case: " + id + "\r\n\r\n" + body
}

// netHTTPFrames is what net/http's parser reads from in: each request
// with its whole body, up to the first error.
func netHTTPFrames(in string) []string {
	br := bufio.NewReader(strings.NewReader(in))
	var out []string
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return out
		}
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return out
		}
		out = append(out, fmt.Sprintf("%s %s %q", req.Method, req.RequestURI, b))
	}
}

// sendHalfClosed writes in from its own source address, closes the
// writing side and reads until the gateway closes.
func sendHalfClosed(t testing.TB, addr string, src net.IP, in string) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a safety deadline only
	if _, err := io.WriteString(c, in); err != nil {
		return // refused before the end (the answer was read or not)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_, _ = io.Copy(io.Discard, c)
}

func TestSmugglerCorpus(t *testing.T) {
	muts := loadSmuggler(t)
	if len(muts) < 2500 {
		t.Fatalf("%d mutations: corpus truncated", len(muts))
	}
	if testing.Short() {
		// default.py's alone (with their raw variants).
		n := 0
		for n < len(muts) && strings.HasPrefix(muts[n].name, "default/") {
			n++
		}
		muts = muts[:n]
	}
	engines(t, func(t *testing.T) {
		up := newSmugglingUpstream(t)
		tg := startGateway(t, `
upstreams: [{name: app, targets: ["{{APP}}"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
access_log: {mode: all, sample: 1, max_per_second: 1000000}
control: {enabled: false}
`, map[string]string{"APP": up.URL}, gwOpts{})
		addr := strings.TrimPrefix(tg.url, "http://")
		type job struct {
			id, in string
		}
		jobs := make(chan job)
		var wg sync.WaitGroup
		var n atomic.Uint32
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range jobs {
					k := n.Add(1)
					src := net.IPv4(127, byte(64+k>>16&63), byte(k>>8), byte(k))
					sendHalfClosed(t, addr, src, j.in)
				}
			}()
		}
		var all []job
		names := map[string]string{}
		for i, m := range muts {
			for _, p := range smugglerProbes {
				id := fmt.Sprintf("%d%s", i, p.name)
				names[id] = m.name + "/" + p.name
				all = append(all, job{id, smugglerPayload(m, p.cl, p.body, id)})
			}
		}
		for _, j := range all {
			jobs <- j
		}
		close(jobs)
		wg.Wait()

		forwarded, parsed := 0, 0
		for _, j := range all {
			up.mu.Lock()
			got := up.log[j.id]
			up.mu.Unlock()
			ref := netHTTPFrames(j.in)
			parsed += len(ref)
			if len(got) > len(ref) || strings.Join(got, "\n") != strings.Join(ref[:len(got)], "\n") {
				t.Errorf("%s: the upstream received\n  %q\nnet/http's parser reads\n  %q\nfrom %q", names[j.id], got, ref, j.in)
			}
			forwarded += len(got)
		}
		// Every request the upstream was sent is one the gateway
		// decided to forward: the access log names the upstream in as
		// many lines. (A line is written when the gateway is done with
		// its request, which may be just after the client saw the
		// connection close.)
		decided := func() int {
			n := 0
			for _, l := range strings.Split(tg.logs.String(), "\n") {
				if strings.Contains(l, `"msg":"access"`) && strings.Contains(l, `"upstream":"app"`) {
					n++
				}
			}
			return n
		}
		for end := time.Now().Add(5 * time.Second); int64(decided()) != up.hits.Load() && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		if d, hits := decided(), up.hits.Load(); int64(d) != hits {
			t.Errorf("the upstream was sent %d requests; the gateway decided to forward %d", hits, d)
		}
		t.Logf("%d payloads: net/http's parser reads %d requests; %d forwarded whole, %d sent to the upstream", len(all), parsed, forwarded, up.hits.Load())
	})
}
