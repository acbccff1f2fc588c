package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// syncBuffer collects the server's log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the real main loop on a loopback port and returns its base
// URL; the test's cleanup stops it and checks it shut down cleanly.
func start(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), logs, func(a string) { addrc <- a })
	}()
	select {
	case a := <-addrc:
		t.Cleanup(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("run: %v", err)
			}
		})
		return "http://" + a, logs
	case err := <-errc:
		cancel()
		t.Fatalf("run: %v\n%s", err, logs)
	}
	return "", nil
}

func usersFile(t *testing.T) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte("wonderland"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(p, []byte("# test users\nAlice:"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// client returns an HTTP client whose connections come from the loopback
// address src, so each client is a distinct peer.
func client(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

type result struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, c *http.Client, base, body string) result {
	t.Helper()
	resp, err := c.Post(base+"/login", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, string(b)}
}

func creds(user, password string) string {
	b, _ := json.Marshal(map[string]string{"username": user, "password": password})
	return string(b)
}

func TestEndToEndMemory(t *testing.T) {
	base, logs := start(t, "-users", usersFile(t), "-lockout-failures", "3")
	a := client("127.0.0.11")

	// Missing credentials: 400, not counted.
	for _, body := range []string{`{}`, `{"username":"alice"}`, `{"password":"x"}`, `{"username":" ","password":"x"}`, `not json`} {
		if r := post(t, a, base, body); r.status != 400 || r.header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
	// Five attempts, right or wrong, then 429; a success clears nothing.
	for i, pw := range []string{"wonderland", "wrong", "wonderland", "wonderland", "wonderland"} {
		r := post(t, a, base, creds(" ALICE ", pw))
		want := 200
		if pw == "wrong" {
			want = 401
		}
		if r.status != want || r.header.Get("X-RateLimit-Limit") != "5" || r.header.Get("X-RateLimit-Remaining") != fmt.Sprint(4-i) {
			t.Fatalf("attempt %d: %d %v %s", i, r.status, r.header, r.body)
		}
		reset, err := time.Parse(time.RFC3339, r.header.Get("X-RateLimit-Reset"))
		if err != nil || !strings.HasSuffix(r.header.Get("X-RateLimit-Reset"), "Z") || time.Until(reset) > 61*time.Second || time.Until(reset) < 50*time.Second {
			t.Fatalf("X-RateLimit-Reset %q", r.header.Get("X-RateLimit-Reset"))
		}
	}
	r := post(t, a, base, creds("alice", "wonderland"))
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatal(err)
	}
	if r.status != 429 || r.header.Get("Retry-After") == "" || r.header.Get("X-RateLimit-Remaining") != "0" ||
		p["errorCode"] != "rate-limit-exceeded" || p["retryAfter"] == nil || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("sixth attempt: %d %v %s", r.status, r.header, r.body)
	}
	// Another client has its own quota.
	if r := post(t, client("127.0.0.12"), base, creds("alice", "wonderland")); r.status != 200 {
		t.Fatalf("other client: %d", r.status)
	}

	// Lockout: three wrong passwords (from two clients) lock alice; then
	// even the right password gets the same 401 as a wrong one, and an
	// unknown user gets exactly the same answers.
	wrong := post(t, client("127.0.0.13"), base, creds("alice", "nope"))
	post(t, client("127.0.0.13"), base, creds("alice", "nope"))
	post(t, client("127.0.0.14"), base, creds("alice", "nope"))
	locked := post(t, client("127.0.0.15"), base, creds("alice", "wonderland"))
	var unknown []result
	for range 4 {
		unknown = append(unknown, post(t, client("127.0.0.16"), base, creds("mallory", "wonderland")))
	}
	for _, r := range append([]result{wrong, locked}, unknown...) {
		if r.status != 401 || r.body != wrong.body || r.header.Get("Retry-After") != "" {
			t.Fatalf("401 answers differ: %d %q vs %q", r.status, r.body, wrong.body)
		}
	}

	// The log carries no username, password or client address.
	out := logs.String()
	for _, secret := range []string{"alice", "mallory", "wonderland", "127.0.0.1" + "1", "127.0.0.13"} {
		if strings.Contains(strings.ToLower(out), secret) {
			t.Errorf("log leaks %q:\n%s", secret, out)
		}
	}
}

// TestEndToEndRedis: two replicas share one Redis. 50 concurrent attempts
// split between them admit exactly 5; a Redis crash degrades logins
// instead of failing them, and the events are logged.
func TestEndToEndRedis(t *testing.T) {
	rd := testsvc.StartRedis(t)
	users := usersFile(t)
	var bases [2]string
	var logs [2]*syncBuffer
	for i := range bases {
		// The longest Redis timeouts: the claim is the exact count, and a
		// dial that missed the 1 s default on a loaded machine (load
		// average 40 was seen) made that attempt degraded, admitting a
		// sixth. A killed Redis refuses at once, whatever the timeout.
		bases[i], logs[i] = start(t, "-store", "redis", "-redis-addr", rd.Addr(), "-users", users, "-redis-timeout", "10s")
	}
	c := client("127.0.0.21")
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		counts = map[int]int{}
	)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := post(t, c, bases[i%2], creds("alice", "wonderland"))
			mu.Lock()
			counts[r.status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[200] != 5 || counts[429] != 45 {
		t.Fatalf("statuses %v, want 5×200 and 45×429", counts)
	}

	t.Log("killing redis")
	rd.Kill()
	d := client("127.0.0.22")
	for i := range 8 { // more than the limit: nothing is counted
		r := post(t, d, bases[i%2], creds("alice", "wonderland"))
		if r.status != 200 || r.header.Get("X-RateLimit-Limit") != "5" || r.header.Get("X-RateLimit-Remaining") != "" || r.header.Get("X-RateLimit-Reset") != "" {
			t.Fatalf("degraded attempt %d: %d %v %s", i, r.status, r.header, r.body)
		}
	}
	t.Log("degraded logins done")
	if r := post(t, d, bases[0], creds("alice", "bad")); r.status != 401 {
		t.Fatalf("wrong password while degraded: %d", r.status)
	}
	for _, want := range []string{`"type":"CACHE_UNAVAILABLE","cache":"login-rate-limit","component":"login-rate-limit"`, `"type":"CACHE_UNAVAILABLE","cache":"login-lockout","component":"login-lockout"`} {
		if !strings.Contains(logs[0].String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs[0])
		}
	}

	t.Log("restarting redis")
	rd.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs[0].String(), `"type":"CACHE_RECOVERED","cache":"login-rate-limit"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery:\n%s", logs[0])
		}
		post(t, client("127.0.0.23"), bases[0], creds("alice", "wonderland"))
		time.Sleep(10 * time.Millisecond)
	}
	if r := post(t, client("127.0.0.24"), bases[0], creds("alice", "wonderland")); r.status != 200 || r.header.Get("X-RateLimit-Remaining") != "4" {
		t.Fatalf("after recovery: %d %v", r.status, r.header)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-store", "disk"},
		{"-limit", "1000"},
		{"-lockout-duration", "48h"},
		{"-bcrypt-cost", "99"},
		{"-bcrypt-cost", "4", "-redis-addr", "127.0.0.1:1", "-store", "redis", "-window", "1500us"},
		{"-users", "/nonexistent/users"},
		{"-nope"},
		{"extra"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), append([]string{"-addr", "127.0.0.1:0", "-bcrypt-cost", "4"}, args...), &out, nil); err == nil {
			t.Errorf("%v: started", args)
		}
	}
}
