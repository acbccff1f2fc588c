package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/login/redisstore"
	"github.com/bulwarkhq/bulwark/wire"
)

// Bounds of the reference server.
const (
	maxBodyBytes     = 4 << 10 // a login request body
	maxPasswordBytes = 1024    // longer is malformed (bcrypt reads 72)
	maxUsersFile     = 1 << 20
	maxUsers         = 10_000
)

// config is what the flags set.
type config struct {
	Store           string // "memory" or "redis"
	RedisAddr       string
	RedisTimeout    time.Duration // dial, read and write; 0: the store's defaults
	UsersFile       string
	BcryptCost      int
	Limit           int
	Window          time.Duration
	LockoutFailures int
	LockoutWindow   time.Duration
	LockoutDuration time.Duration
	Logger          *slog.Logger
}

// server is the login service: limiter middleware, then lockout, then
// bcrypt.
type server struct {
	http.Handler
	lockout *login.Lockout
	users   map[string][]byte // normalized username → bcrypt hash
	dummy   []byte            // compared for unknown users, so they cost the same
	closers []func() error
}

func newServer(cfg config) (_ *server, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &server{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	var (
		rate login.Store
		lock login.LockoutStore
	)
	switch cfg.Store {
	case "memory":
		ms, err := login.NewMemoryStore(login.MemoryConfig{})
		if err != nil {
			return nil, err
		}
		ml, err := login.NewMemoryLockoutStore(login.MemoryConfig{})
		if err != nil {
			ms.Close()
			return nil, err
		}
		s.closers = append(s.closers, func() error { ms.Close(); ml.Close(); return nil })
		rate, lock = ms, ml
	case "redis":
		rs, err := redisstore.Open(redisstore.Options{Addr: cfg.RedisAddr,
			DialTimeout: cfg.RedisTimeout, ReadTimeout: cfg.RedisTimeout, WriteTimeout: cfg.RedisTimeout})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, rs.Close)
		rate, lock = rs, rs
	default:
		return nil, fmt.Errorf("-store must be memory or redis, got %q", cfg.Store)
	}

	// Cache events carry no client data; log them for the operator.
	listener := func(e login.Event) {
		cfg.Logger.Warn("login cache event", slog.String("type", string(e.Type)), slog.String("cache", e.Cache),
			slog.String("component", string(e.Component)), slog.Time("at", e.At), slog.String("principal", e.Principal))
	}
	lim, err := login.New(login.Config{Limit: cfg.Limit, Window: cfg.Window, Store: rate, Listener: listener, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	s.lockout, err = login.NewLockout(login.LockoutConfig{
		MaxFailures: cfg.LockoutFailures, Window: cfg.LockoutWindow, Duration: cfg.LockoutDuration,
		Store: lock, Listener: listener, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	// Users last: hashing is the slow part of start-up.
	if s.users, err = loadUsers(cfg.UsersFile, cfg.BcryptCost); err != nil {
		return nil, err
	}
	cost := bcrypt.MinCost
	for _, h := range s.users {
		if c, _ := bcrypt.Cost(h); c > cost {
			cost = c
		}
	}
	if s.dummy, err = bcrypt.GenerateFromPassword([]byte("no such user"), cost); err != nil {
		return nil, err
	}
	// This handler reads only its JSON body, and a request without a
	// password is malformed too, so the middleware uses the handler's own
	// reader rather than the default (which reads every place a framework
	// might: query, JSON, form, multipart).
	throttle, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: lim, Username: username})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /login", throttle(http.HandlerFunc(s.login)))
	s.Handler = mux
	return s, nil
}

// Close releases the stores.
func (s *server) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	s.closers = nil
	return errors.Join(errs...)
}

type credentials struct {
	Username *string `json:"username"`
	Password *string `json:"password"`
}

// readCredentials reads the bounded JSON body, puts it back for the next
// reader and validates its shape.
func readCredentials(r *http.Request) (user, password string, err error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return "", "", err
	}
	if len(b) > maxBodyBytes {
		return "", "", errors.New("body too large")
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	var c credentials
	if err := json.Unmarshal(b, &c); err != nil {
		return "", "", err
	}
	if c.Username == nil || c.Password == nil || strings.TrimSpace(*c.Username) == "" || *c.Password == "" {
		return "", "", login.ErrMissingCredentials
	}
	if len(*c.Password) > maxPasswordBytes {
		return "", "", errors.New("password too long")
	}
	return *c.Username, *c.Password, nil
}

// username is the middleware's extractor.
func username(r *http.Request) (string, error) {
	u, _, err := readCredentials(r)
	return u, err
}

// login runs after the limiter admitted the attempt.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	user, password, err := readCredentials(r)
	if err != nil {
		login.RejectError(w, r, err)
		return
	}
	ctx := r.Context()
	if st, err := s.lockout.Check(ctx, user); err != nil {
		login.RejectError(w, r, err)
		return
	} else if st.Locked {
		// Same answer as a wrong password, for any username.
		deny(w)
		return
	}
	hash, known := s.users[login.NormalizeUsername(user)]
	if !known {
		hash = s.dummy
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || !known {
		_, _ = s.lockout.RecordFailure(ctx, user)
		deny(w)
		return
	}
	_, _ = s.lockout.RecordSuccess(ctx, user)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
}

func deny(w http.ResponseWriter) {
	wire.Write(w, wire.Problem{Status: http.StatusUnauthorized, Code: "invalid_credentials", Detail: "Invalid username or password."})
}

// loadUsers reads "username:bcrypt-hash" lines, or creates the demo user.
func loadUsers(path string, demoCost int) (map[string][]byte, error) {
	if path == "" {
		if demoCost < bcrypt.MinCost || demoCost > bcrypt.MaxCost {
			return nil, fmt.Errorf("-bcrypt-cost must be between %d and %d, got %d", bcrypt.MinCost, bcrypt.MaxCost, demoCost)
		}
		h, err := bcrypt.GenerateFromPassword([]byte("wonderland"), demoCost)
		if err != nil {
			return nil, err
		}
		return map[string][]byte{"alice": h}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	users := map[string][]byte{}
	sc := bufio.NewScanner(io.LimitReader(f, maxUsersFile))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, hash, ok := strings.Cut(text, ":")
		name = login.NormalizeUsername(name)
		if !ok || name == "" || len(name) > login.MaxUsernameBytes {
			return nil, fmt.Errorf("%s:%d: want username:bcrypt-hash", path, line)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("%s:%d: not a bcrypt hash", path, line)
		}
		if _, dup := users[name]; dup {
			return nil, fmt.Errorf("%s:%d: duplicate user", path, line)
		}
		if len(users) == maxUsers {
			return nil, fmt.Errorf("%s: more than %d users", path, maxUsers)
		}
		users[name] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%s: no users", path)
	}
	return users, nil
}
