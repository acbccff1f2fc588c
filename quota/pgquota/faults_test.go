package pgquota_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// relay is a TCP proxy between pgx and PostgreSQL that understands just
// enough of the wire protocol (backend messages: type byte, int32 length)
// to lose a response: when armed, it forwards the client's statement as
// usual, and as soon as the server starts answering it with a DataRow or
// CommandComplete it swallows everything up to ReadyForQuery (so the
// implicit transaction has committed) and cuts both connections. The client
// never sees the answer.
type relay struct {
	t      testing.TB
	ln     net.Listener
	target string
	armed  atomic.Bool
	cuts   chan struct{}

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newRelay(t testing.TB, target string) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{t: t, ln: ln, target: target, cuts: make(chan struct{}, 16)}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) track(c net.Conn) {
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", r.target)
		if err != nil {
			client.Close()
			continue
		}
		r.track(client)
		r.track(server)
		r.wg.Add(2)
		go func() { // client → server, verbatim
			defer r.wg.Done()
			_, _ = io.Copy(server, client)
			server.Close()
		}()
		go func() { // server → client, message by message
			defer r.wg.Done()
			defer client.Close()
			defer server.Close()
			r.pump(client, bufio.NewReader(server))
		}()
	}
}

func (r *relay) pump(client net.Conn, server *bufio.Reader) {
	for {
		typ, msg, err := readMessage(server)
		if err != nil {
			return
		}
		if (typ == 'D' || typ == 'C') && r.armed.CompareAndSwap(true, false) {
			for typ != 'Z' {
				if typ, _, err = readMessage(server); err != nil {
					break
				}
			}
			r.cuts <- struct{}{}
			return // deferred closes cut both sides
		}
		if _, err := client.Write(msg); err != nil {
			return
		}
	}
}

// readMessage reads one backend message and returns its type and bytes.
func readMessage(br *bufio.Reader) (byte, []byte, error) {
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > 1<<24 {
		return 0, nil, fmt.Errorf("relay: bad message length %d", n)
	}
	msg := make([]byte, 5+int(n)-4)
	copy(msg, hdr)
	if _, err := io.ReadFull(br, msg[5:]); err != nil {
		return 0, nil, err
	}
	return hdr[0], msg, nil
}

// Proof 3: the server commits, the response is lost on the way back, the
// client sees an error; the replay with the same receipt (and the same
// request, so the same fingerprint) succeeds without consuming and the
// durable count stays 1; the receipt's replay count is 1.
func TestLostResponseReplay(t *testing.T) {
	e := newEnv(t)
	rl := newRelay(t, fmt.Sprintf("127.0.0.1:%d", e.pg.Port()))
	viaRelay := fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", runRole, runPassword, rl.addr(), dbName)
	s := e.open(t, viaRelay, pgquota.Config{Operations: ops(5, time.Minute)})
	c := ctx(t)

	// Warm the connection and the statement cache on another bucket, so
	// the cut hits the cached (one round trip) path.
	if d, err := s.Consume(c, req("warm", "w1")); err != nil || !d.Allowed {
		t.Fatalf("warm-up: %+v, %v", d, err)
	}

	rl.armed.Store(true)
	d, err := s.Consume(c, req("u", "lost-1"))
	mustUnavailable(t, d, err, "")
	select {
	case <-rl.cuts:
	case <-time.After(testTimeout):
		t.Fatal("the relay never cut a response")
	}
	if got := e.bucket(t, req("u", "")); got.count != 1 || !slices.Equal(got.receipts, []string{"lost-1"}) {
		t.Fatalf("after the lost response the durable bucket is %+v; want the committed count 1", got)
	}

	// Retry with the same receipt (through the relay, now disarmed, on a
	// new connection): allowed, replayed, nothing consumed.
	d, err = s.Consume(c, req("u", "lost-1"))
	if err != nil || !d.Allowed || !d.Replayed || d.Remaining != 4 {
		t.Fatalf("replay after the lost response = %+v, %v; want allowed+replayed, remaining 4", d, err)
	}
	if got := e.bucket(t, req("u", "")); got.count != 1 || !slices.Equal(got.replays, []int16{1}) {
		t.Fatalf("the replay consumed, or was not counted as a replay: %+v", got)
	}
	// A new logical request still consumes normally.
	if d, err := s.Consume(c, req("u", "next-2")); err != nil || !d.Allowed || d.Replayed || d.Remaining != 3 {
		t.Fatalf("next request = %+v, %v", d, err)
	}
}

// Proof 5: the database is killed while instances are deciding: every
// call after the kill is unavailable (never allowed), every receipt that
// was reported allowed is durable, and after a restart decisions resume
// (retrying with the same receipt, as the docs say).
func TestDatabaseKilledMidRun(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(quota.MaxLimit, time.Minute), CallTimeout: 3 * time.Second})

	const workers = 4
	var (
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		total    atomic.Int64
		failures atomic.Int64
		mu       sync.Mutex
		allowed  = make([][]string, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				select {
				case <-stop:
					return
				default:
				}
				receipt := fmt.Sprintf("w%d-%d", w, i)
				d, err := s.Consume(ctx(t), req(fmt.Sprintf("worker-%d", w), receipt))
				switch {
				case err == nil && d.Allowed:
					mu.Lock()
					allowed[w] = append(allowed[w], receipt)
					mu.Unlock()
					total.Add(1)
				case err == nil:
					t.Errorf("worker %d: unexpected denial %+v", w, d)
				default:
					if !errors.Is(err, quota.ErrUnavailable) || d.Allowed {
						t.Errorf("worker %d: %+v, %v; want unavailable", w, d, err)
					}
					failures.Add(1)
				}
			}
		}()
	}
	for deadline := time.Now().Add(testTimeout); total.Load() < 40 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // waiting for the workers, not for time to pass
	}
	e.pg.Kill()
	for i := range 3 {
		d, err := s.Consume(ctx(t), req("after-kill", fmt.Sprintf("k%d", i)))
		mustUnavailable(t, d, err, "")
	}
	for deadline := time.Now().Add(testTimeout); failures.Load() < workers && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failures.Load() == 0 {
		t.Fatal("no worker observed the killed database")
	}

	e.pg.Restart()
	var d quota.Decision
	var err error
	for deadline := time.Now().Add(testTimeout); time.Now().Before(deadline); {
		if d, err = s.Consume(ctx(t), req("after-kill", "k0")); err == nil {
			break
		}
		mustUnavailable(t, d, err, "")
		time.Sleep(50 * time.Millisecond) // waiting for the pool to reconnect
	}
	if err != nil || !d.Allowed {
		t.Fatalf("after restart: %+v, %v; want decisions to resume", d, err)
	}
	for w := range workers {
		got := e.bucket(t, req(fmt.Sprintf("worker-%d", w), ""))
		for _, r := range allowed[w] {
			if !slices.Contains(got.receipts, r) {
				t.Fatalf("worker %d: receipt %s was reported allowed but is not durable", w, r)
			}
		}
		if got.count != len(got.receipts) || got.count < len(allowed[w]) {
			t.Fatalf("worker %d: durable %d receipts, %d reported allowed", w, got.count, len(allowed[w]))
		}
	}
	t.Logf("allowed before the kill: %d; unavailable answers: %d", total.Load(), failures.Load())
}
