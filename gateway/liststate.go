package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/redis/go-redis/v9"
)

// Runtime list entries survive a restart
//
// Entries added through the control API or the console (runtime entries,
// as opposed to the configuration's static ones) are kept:
//
//   - standalone, with a state directory (Deps.StateDir): in a state file
//     next to the control token, listStatePath (the token file's name with
//     ".lists.json" for ".token"), rewritten after every change the API or
//     console makes: written aside with mode 0600, synced, then renamed
//     over the old one, so a crash leaves the old file or the new one,
//     never half of one. Each entry keeps its absolute expiry: restored
//     at the next start with what is left of its TTL, dropped when it
//     expired meanwhile.
//   - cluster: in Redis (listRedisKey: one hash per list, field = prefix,
//     value = expiry and reason), written through on every change, with
//     a version counter (listVersionKey) bumped on each. Every replica
//     loads the hashes at start and, every second, when the version
//     moved, makes its runtime entries equal to them (adds what is
//     missing or changed, removes the entries another replica removed):
//     a block through one replica holds on every replica within about a
//     second, and survives every restart. A change made while Redis is
//     unreachable applies on its replica only (a warning says so).
//
// At most MaxSavedEntries entries per list are saved (the most a file
// or hash holds; a larger file is refused at start): beyond it an
// entry still applies but is not saved, and a warning says so. A
// configuration's static entry wins over a saved runtime entry for the
// same prefix, as at reload. A failed save is logged (list and error,
// never a prefix) and the change stays in force in memory.

// MaxSavedEntries bounds the runtime entries saved per list.
const MaxSavedEntries = 10_000

// maxListStateBytes bounds the state file read at start.
const maxListStateBytes = 4 << 20

// Redis keys of the cluster's runtime lists.
const (
	listRedisKeyPrefix = "bulwark:lists:"
	listVersionKey     = "bulwark:lists:version"
	listRedisTimeout   = 2 * time.Second
)

func listRedisKey(list string) string { return listRedisKeyPrefix + list }

// savedEntry is one runtime entry as saved.
type savedEntry struct {
	Prefix string `json:"prefix"`
	// ExpiresMs is the expiry in Unix milliseconds; 0 never expires.
	ExpiresMs int64  `json:"expires_ms,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// listState is the state file.
type listState struct {
	Version int          `json:"version"`
	Allow   []savedEntry `json:"allow"`
	Deny    []savedEntry `json:"deny"`
}

// listStatePath is the state file of the gateway whose control API is
// configured on addr: beside its token file.
func listStatePath(dir, addr string) string {
	return strings.TrimSuffix(control.TokenPath(dir, addr), ".token") + ".lists.json"
}

// listStore saves runtime entries; nil saves nothing.
type listStore struct {
	g    *Gateway
	path string                // standalone: the state file
	rc   redis.UniversalClient // cluster
	mu   sync.Mutex            // serializes saves
	// seen is the last version of the cluster's lists applied here, and
	// shared the prefixes each list (allow, deny) had in Redis then:
	// only those are removed here when another replica removed them
	// (an entry added here while Redis was unreachable stays).
	seen   int64
	shared map[string]map[netip.Prefix]bool
}

func (g *Gateway) newListStore(cfg *Config) *listStore {
	switch {
	case g.opsRedis != nil:
		return &listStore{g: g, rc: g.opsRedis, seen: -1, shared: map[string]map[netip.Prefix]bool{}}
	case g.deps.StateDir != "":
		return &listStore{g: g, path: listStatePath(g.deps.StateDir, cfg.Control.Addr)}
	}
	return nil
}

// setOf returns the set a list name names.
func (g *Gateway) setOf(list string) (*ipset.Set, int) {
	if list == "allow" {
		return g.lists.allow, 0
	}
	return g.lists.deny, 1
}

// runtimeEntries returns list's entries the configuration did not
// install as they are, at most MaxSavedEntries (and whether there were
// more).
func (g *Gateway) runtimeEntries(list string) ([]ipset.Entry, bool) {
	s, i := g.setOf(list)
	g.mu.Lock()
	static := g.lists.static[i]
	g.mu.Unlock()
	var out []ipset.Entry
	more := false
	s.Range(func(e ipset.Entry) bool {
		if r, ok := static[e.Prefix]; ok && e.Expires.IsZero() && e.Reason == r {
			return true
		}
		if len(out) == MaxSavedEntries {
			more = true
			return false
		}
		out = append(out, e)
		return true
	})
	return out, more
}

func toSaved(e ipset.Entry) savedEntry {
	s := savedEntry{Prefix: e.Prefix.String(), Reason: e.Reason}
	if !e.Expires.IsZero() {
		s.ExpiresMs = e.Expires.UnixMilli()
	}
	return s
}

// restore puts a saved entry back into list unless it expired or the
// configuration has the prefix; it reports whether it did.
func (g *Gateway) restore(list string, se savedEntry, now time.Time) bool {
	p, err := netip.ParsePrefix(se.Prefix)
	if err != nil || p != p.Masked() {
		return false
	}
	s, i := g.setOf(list)
	g.mu.Lock()
	_, static := g.lists.static[i][p]
	g.mu.Unlock()
	if static {
		return false
	}
	var ttl time.Duration
	if se.ExpiresMs != 0 {
		ttl = time.UnixMilli(se.ExpiresMs).Sub(now)
		if ttl < time.Millisecond {
			return false
		}
	}
	if e, ok := s.Get(p); ok && e.Reason == se.Reason && (se.ExpiresMs == 0) == e.Expires.IsZero() &&
		(se.ExpiresMs == 0 || e.Expires.UnixMilli() == se.ExpiresMs) {
		return true // already so
	}
	return s.Add(p, ttl, se.Reason) == nil
}

// listChanged saves a change the control API or the console made.
func (g *Gateway) listChanged(ctx context.Context, list string, p netip.Prefix) {
	ls := g.listStore
	if ls == nil {
		return
	}
	var err error
	if ls.rc != nil {
		err = ls.push(ctx, list, p)
	} else {
		err = ls.save()
	}
	if err != nil {
		g.log.Warn("runtime list change not saved; it applies until a restart", "list", list, "error", errorReason(err))
	}
}

// save rewrites the state file with every runtime entry.
func (ls *listStore) save() error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	st := listState{Version: 1, Allow: []savedEntry{}, Deny: []savedEntry{}}
	for _, l := range []struct {
		name string
		out  *[]savedEntry
	}{{"allow", &st.Allow}, {"deny", &st.Deny}} {
		es, more := ls.g.runtimeEntries(l.name)
		if more {
			ls.g.log.Warn("runtime list entries beyond the saved bound are not saved", "list", l.name, "max", MaxSavedEntries)
		}
		for _, e := range es {
			*l.out = append(*l.out, toSaved(e))
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return control.WriteStateFile(ls.path, b, "lists state file")
}

// load restores the state file's entries (standalone, at New). A missing
// file is no error; an unreadable, oversized or malformed one is.
func (ls *listStore) load() error {
	f, err := os.Open(ls.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gateway: list state %s: %w", ls.path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxListStateBytes+1))
	if err != nil {
		return fmt.Errorf("gateway: list state %s: %w", ls.path, err)
	}
	if len(b) > maxListStateBytes {
		return fmt.Errorf("gateway: list state %s is larger than %d bytes; move it away to start without it", ls.path, maxListStateBytes)
	}
	var st listState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil || st.Version != 1 || len(st.Allow) > MaxSavedEntries || len(st.Deny) > MaxSavedEntries {
		return fmt.Errorf("gateway: list state %s is not a version 1 state file with at most %d entries per list; move it away to start without it", ls.path, MaxSavedEntries)
	}
	now := ls.g.clock.Now()
	n := 0
	for _, l := range []struct {
		name string
		es   []savedEntry
	}{{"allow", st.Allow}, {"deny", st.Deny}} {
		for _, se := range l.es {
			if ls.g.restore(l.name, se, now) {
				n++
			}
		}
	}
	if n > 0 {
		ls.g.log.Info("runtime list entries restored", "file", ls.path, "entries", n)
	}
	return nil
}

// push writes one change to Redis and bumps the version.
func (ls *listStore) push(ctx context.Context, list string, p netip.Prefix) error {
	ctx, cancel := context.WithTimeout(ctx, listRedisTimeout)
	defer cancel()
	s, _ := ls.g.setOf(list)
	key := listRedisKey(list)
	pipe := ls.rc.TxPipeline()
	if e, ok := s.Get(p); ok {
		n, err := ls.rc.HLen(ctx, key).Result()
		if err != nil {
			return err
		}
		if n >= MaxSavedEntries && !ls.rc.HExists(ctx, key, p.String()).Val() {
			return fmt.Errorf("the shared list holds %d entries, the most saved", MaxSavedEntries)
		}
		v, _ := json.Marshal(toSaved(e))
		pipe.HSet(ctx, key, p.String(), v)
	} else {
		pipe.HDel(ctx, key, p.String())
	}
	pipe.Incr(ctx, listVersionKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	// In Redis now: a removal through another replica removes it here.
	ls.mu.Lock()
	if ls.shared[list] == nil {
		ls.shared[list] = map[netip.Prefix]bool{}
	}
	ls.shared[list][p] = true
	ls.mu.Unlock()
	return nil
}

// sync makes the runtime entries equal to the cluster's when its version
// moved (or always, when force).
func (ls *listStore) sync(ctx context.Context, force bool) error {
	ctx, cancel := context.WithTimeout(ctx, listRedisTimeout)
	defer cancel()
	v, err := ls.rc.Get(ctx, listVersionKey).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		return err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if v == ls.seen && !force {
		return nil
	}
	now := ls.g.clock.Now()
	for _, list := range []string{"allow", "deny"} {
		key := listRedisKey(list)
		n, err := ls.rc.HLen(ctx, key).Result()
		if err != nil {
			return err
		}
		if n > MaxSavedEntries {
			return fmt.Errorf("the shared %s list holds %d entries, more than %d", list, n, MaxSavedEntries)
		}
		m, err := ls.rc.HGetAll(ctx, key).Result()
		if err != nil {
			return err
		}
		want := make(map[netip.Prefix]bool, len(m))
		var expired []string
		for field, val := range m {
			var se savedEntry
			if json.Unmarshal([]byte(val), &se) != nil || se.Prefix != field {
				continue
			}
			if se.ExpiresMs != 0 && se.ExpiresMs <= now.UnixMilli() {
				expired = append(expired, field)
				continue
			}
			if ls.g.restore(list, se, now) {
				p, _ := netip.ParsePrefix(field)
				want[p] = true
			}
		}
		es, _ := ls.g.runtimeEntries(list)
		s, _ := ls.g.setOf(list)
		for _, e := range es {
			if ls.shared[list][e.Prefix] && !want[e.Prefix] {
				s.Remove(e.Prefix) // removed (or expired) through another replica
			}
		}
		ls.shared[list] = want
		if len(expired) > 0 {
			ls.rc.HDel(ctx, key, expired...)
		}
	}
	ls.seen = v
	return nil
}

// syncLists runs one sync of the cluster's lists (the sweeper calls it
// every second); failures are logged once until it works again.
func (g *Gateway) syncLists(force bool) {
	ls := g.listStore
	if ls == nil || ls.rc == nil {
		return
	}
	err := ls.sync(context.Background(), force)
	if err != nil && !g.listSyncFailed.Swap(true) {
		g.log.Warn("runtime lists not synchronised with Redis; retrying every second", "error", errorReason(err))
	}
	if err == nil && g.listSyncFailed.Swap(false) {
		g.log.Info("runtime lists synchronised with Redis again")
	}
}
