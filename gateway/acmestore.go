package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
)

// redisStorage is certmagic.Storage on the cluster profile's Redis: what
// listen.tls.acme stores (the account, certificates, keys, challenge
// tokens) is shared by every replica, and its locks are Redis keys with
// an expiry, so that one replica orders a certificate while the others
// wait.
//
// Layout, under prefix: "f:" + key is a hash {v: the value, m: modified,
// Unix nanoseconds} per stored key; "l:" + name is a held lock, whose
// value is the holder's random token. A key's "directories" are the
// prefixes of its "/"-separated path, as certmagic's FileStorage has
// them.
//
// Locks: Lock sets "l:"+name with NX and an expiry of lockTTL, and waits
// (polling every lockPoll, honouring ctx) while another holds it. While
// held, the lock's expiry is extended every lockTTL/3 as long as the
// token is still the holder's; Unlock deletes it only if it is. A
// replica that dies holding a lock loses it after lockTTL.
type redisStorage struct {
	rc     redis.UniversalClient
	prefix string
	log    *slog.Logger

	lockTTL  time.Duration
	lockPoll time.Duration

	mu   sync.Mutex
	held map[string]*heldLock // by lock name
}

type heldLock struct {
	token string
	stop  chan struct{}
	done  chan struct{}
}

// Bounds of redisStorage.
const (
	acmeMaxValueBytes = 1 << 20 // a certificate chain, a key, a JSON document
	acmeMaxKeyBytes   = 1024
	acmeMaxListKeys   = 100_000 // keys a List or a Delete walks at most
	acmeMaxHeldLocks  = 1024    // locks one process holds at once
)

// acmeRedisPrefix is where listen.tls.acme's storage lives in Redis.
const acmeRedisPrefix = "bulwark:acme:"

func newRedisStorage(rc redis.UniversalClient, log *slog.Logger) *redisStorage {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &redisStorage{rc: rc, prefix: acmeRedisPrefix, log: log, lockTTL: 10 * time.Second, lockPoll: 250 * time.Millisecond, held: map[string]*heldLock{}}
}

func (s *redisStorage) fileKey(key string) string  { return s.prefix + "f:" + key }
func (s *redisStorage) lockKey(name string) string { return s.prefix + "l:" + name }

func checkKey(key string) error {
	if key == "" || len(key) > acmeMaxKeyBytes {
		return fmt.Errorf("acme storage: key of %d bytes: want 1 to %d", len(key), acmeMaxKeyBytes)
	}
	return nil
}

// Store puts value at key.
func (s *redisStorage) Store(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(value) > acmeMaxValueBytes {
		return fmt.Errorf("acme storage: value of %d bytes for %q: at most %d", len(value), key, acmeMaxValueBytes)
	}
	return s.rc.HSet(ctx, s.fileKey(key), "v", value, "m", strconv.FormatInt(time.Now().UnixNano(), 10)).Err()
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (s *redisStorage) Load(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	v, err := s.rc.HGet(ctx, s.fileKey(key), "v").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("acme storage: %q: %w", key, fs.ErrNotExist)
	}
	return v, err
}

// Delete removes key and every key under it; a missing key is not an
// error.
func (s *redisStorage) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	keys, err := s.scan(ctx, key+"/")
	if err != nil {
		return err
	}
	keys = append(keys, key)
	for c := range slices.Chunk(keys, 500) {
		full := make([]string, len(c))
		for i, k := range c {
			full[i] = s.fileKey(k)
		}
		if err := s.rc.Del(ctx, full...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Exists reports whether key is stored, or is a directory of stored
// keys.
func (s *redisStorage) Exists(ctx context.Context, key string) bool {
	if checkKey(key) != nil {
		return false
	}
	if n, err := s.rc.Exists(ctx, s.fileKey(key)).Result(); err == nil && n > 0 {
		return true
	}
	under, err := s.scanLimit(ctx, key+"/", 1)
	return err == nil && len(under) > 0
}

// List returns the keys under dir: with recursive every stored key
// below it, else its direct children (stored keys and directories).
func (s *redisStorage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	prefix := ""
	if dir != "" {
		prefix = strings.TrimSuffix(dir, "/") + "/"
	}
	keys, err := s.scan(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if recursive {
		slices.Sort(keys)
		return keys, nil
	}
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		first, _, _ := strings.Cut(k[len(prefix):], "/")
		child := prefix + first
		if !seen[child] {
			seen[child] = true
			out = append(out, child)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("acme storage: %q: %w", dir, fs.ErrNotExist)
	}
	return out, nil
}

// Stat describes key: a stored key with its size and modification time,
// or a directory.
func (s *redisStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	if err := checkKey(key); err != nil {
		return certmagic.KeyInfo{}, err
	}
	fk := s.fileKey(key)
	pipe := s.rc.Pipeline()
	m := pipe.HGet(ctx, fk, "m")
	n := pipe.HStrLen(ctx, fk, "v")
	_, err := pipe.Exec(ctx)
	switch {
	case err == nil:
		nanos, _ := strconv.ParseInt(m.Val(), 10, 64)
		return certmagic.KeyInfo{Key: key, Modified: time.Unix(0, nanos), Size: n.Val(), IsTerminal: true}, nil
	case !errors.Is(err, redis.Nil):
		return certmagic.KeyInfo{}, err
	}
	under, err := s.scanLimit(ctx, key+"/", 1)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	if len(under) == 0 {
		return certmagic.KeyInfo{}, fmt.Errorf("acme storage: %q: %w", key, fs.ErrNotExist)
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

// scan returns the stored keys that start with prefix (without the
// Redis prefix), at most acmeMaxListKeys.
func (s *redisStorage) scan(ctx context.Context, prefix string) ([]string, error) {
	keys, err := s.scanLimit(ctx, prefix, acmeMaxListKeys+1)
	if err == nil && len(keys) > acmeMaxListKeys {
		return nil, fmt.Errorf("acme storage: more than %d keys under %q", acmeMaxListKeys, prefix)
	}
	return keys, err
}

func (s *redisStorage) scanLimit(ctx context.Context, prefix string, limit int) ([]string, error) {
	base := s.fileKey("")
	it := s.rc.Scan(ctx, 0, globEscape(base+prefix)+"*", 1000).Iterator()
	var keys []string
	for len(keys) < limit && it.Next(ctx) {
		keys = append(keys, strings.TrimPrefix(it.Val(), base))
	}
	return keys, it.Err()
}

// globEscape escapes the glob characters of a Redis MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

var (
	// extendLock sets a lock's expiry if the token still holds it.
	extendLock = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0`)
	// releaseLock deletes a lock if the token still holds it.
	releaseLock = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)
)

// Lock takes the named lock, waiting while another holder has it.
func (s *redisStorage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(s.lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// TryLock takes the named lock if no one holds it.
func (s *redisStorage) TryLock(ctx context.Context, name string) (bool, error) {
	if err := checkKey(name); err != nil {
		return false, err
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	s.mu.Lock()
	n := len(s.held)
	s.mu.Unlock()
	if n >= acmeMaxHeldLocks {
		return false, fmt.Errorf("acme storage: %d locks held: at most %d", n, acmeMaxHeldLocks)
	}
	ok, err := s.rc.SetNX(ctx, s.lockKey(name), token, s.lockTTL).Result()
	if err != nil || !ok {
		return false, err
	}
	h := &heldLock{token: token, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	s.held[name] = h
	s.mu.Unlock()
	go s.keepAlive(name, h)
	return true, nil
}

// keepAlive extends h's expiry until Unlock stops it.
func (s *redisStorage) keepAlive(name string, h *heldLock) {
	defer close(h.done)
	t := time.NewTicker(s.lockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.lockTTL/3)
			n, err := extendLock.Run(ctx, s.rc, []string{s.lockKey(name)}, h.token, s.lockTTL.Milliseconds()).Int()
			cancel()
			if err == nil && n == 0 {
				s.log.Warn("acme: storage lock lost (expired before it was extended)", "lock", name)
				return
			}
		}
	}
}

// Unlock releases the named lock, if this process still holds it.
func (s *redisStorage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("acme storage: lock %q is not held", name)
	}
	close(h.stop)
	<-h.done
	return releaseLock.Run(ctx, s.rc, []string{s.lockKey(name)}, h.token).Err()
}

// String names the storage in certmagic's logs.
func (s *redisStorage) String() string { return "redis" }

var (
	_ certmagic.Storage   = (*redisStorage)(nil)
	_ certmagic.TryLocker = (*redisStorage)(nil)
)
