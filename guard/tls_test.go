package guard_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/guard"
)

// helperEnv makes the test binary act as a flood client (runHelper) so that
// the server's CPU time can be measured without the client's.
const helperEnv = "BULWARK_GUARD_TEST_HELPER"

func runHelper() int {
	switch os.Getenv(helperEnv) {
	case "tlsflood":
		return tlsFloodClient(os.Getenv("ADDR"), os.Getenv("SRC"), atoi(os.Getenv("N")), atoi(os.Getenv("CONC")))
	case "dribble":
		return dribbleProcess(os.Getenv("ADDR"), atoi(os.Getenv("N")))
	}
	fmt.Fprintln(os.Stderr, "unknown helper")
	return 2
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// tlsFloodClient runs n TLS handshakes from src with conc at a time and
// prints how many completed.
func tlsFloodClient(addr, src string, n, conc int) int {
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	// The child has its own test certificate; the parent's is unknown here
	// and verifying it is beside the point of a flood.
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				d := &tls.Dialer{Config: cfg, NetDialer: &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c, err := d.DialContext(ctx, "tcp", addr)
				cancel()
				if err != nil {
					if failed.Add(1) == 1 && os.Getenv("DEBUG") != "" {
						fmt.Fprintln(os.Stderr, err)
					}
					continue
				}
				ok.Add(1)
				c.Close()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("ok=%d failed=%d\n", ok.Load(), failed.Load())
	return 0
}

// A TLS handshake flood from one address is refused beyond
// tls.max_handshakes_per_addr_per_sec at accept, before any handshake work:
// the server never reads the refused ClientHellos (GetConfigForClient, the
// first callback of a handshake, is not called for them), and the
// server's CPU time per attempt falls accordingly. The flood runs in a
// child process so that the CPU time measured here is the server's.
func TestTLSHandshakeFloodRefusedBeforeWork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	tlsModes(t, testTLSHandshakeFloodRefusedBeforeWork)
}

func testTLSHandshakeFloodRefusedBeforeWork(t *testing.T, m mode) {
	const n, conc, rate = 300, 16, 20
	run := func(perSec int) (started int64, cpu time.Duration, elapsed time.Duration, out string, s *server) {
		var hs atomic.Int64
		cfg := guard.Config{
			TLS:   guard.TLSConfig{MaxHandshakesPerAddr: perSec},
			Conns: guard.ConnConfig{AcceptRatePerAddr: 1e6, AcceptBurstPerAddr: 1e6, MaxIncompletePerAddr: 1000, MaxPerAddr: 1000},
		}
		s = startServer(t, m, cfg, okServer{}, func(hc *hostConfig, _ *guard.Options) {
			base := serverTLSConfig()
			base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
				hs.Add(1)
				return nil, nil
			}
			hc.TLSConfig = base
		})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=tlsflood", "ADDR="+s.addr, "SRC=127.0.0.50",
			"N="+strconv.Itoa(n), "CONC="+strconv.Itoa(conc))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cpu0 := processCPU()
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("flood client: %v: %s", err, stderr.String())
		}
		elapsed = time.Since(t0)
		// Connections refused at accept are closed at once; let the last
		// accepted handshakes finish.
		waitFor(t, "handshakes to finish", func() bool { return s.g.Stats().Handshakes == 0 })
		cpu = processCPU() - cpu0
		return hs.Load(), cpu, elapsed, strings.TrimSpace(stdout.String() + " " + stderr.String()), s
	}

	started, cpu, elapsed, out, s := run(rate)
	refused := s.c.get("refused:" + guard.RefuseHandshakeRate)
	allowed := int64(rate) * (int64(elapsed/time.Second) + 2)
	t.Logf("guarded: %d attempts in %s (%s): %d handshakes started, %d refused at accept; server CPU %s (%.0f µs/attempt)",
		n, elapsed.Round(time.Millisecond), out, started, refused, cpu.Round(time.Millisecond), float64(cpu.Microseconds())/n)
	if started > allowed {
		t.Fatalf("%d handshakes started in %s, the rate allows at most %d", started, elapsed, allowed)
	}
	if int64(refused)+started != n {
		t.Fatalf("refused %d + started %d != %d attempts: some refused connections did handshake work", refused, started, n)
	}

	bStarted, bCPU, bElapsed, bOut, _ := run(1e6)
	t.Logf("unguarded baseline: %d attempts in %s (%s): %d handshakes started; server CPU %s (%.0f µs/attempt)",
		n, bElapsed.Round(time.Millisecond), bOut, bStarted, bCPU.Round(time.Millisecond), float64(bCPU.Microseconds())/n)
	if bStarted != n {
		t.Fatalf("baseline started %d handshakes, want %d", bStarted, n)
	}
}
