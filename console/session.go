package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"sync"
	"time"
)

// sessionIDBytes is the entropy of a session id; its cookie form is
// unpadded URL-safe base64 (43 characters).
const (
	sessionIDBytes = 32
	sessionIDChars = 43
)

// session is one logged-in browser. Only the digest of its id is kept.
type session struct {
	key      [sha256.Size]byte
	tag      string // for audit lines: 8 hex digits of the digest, never the id
	created  time.Time
	lastSeen time.Time
}

// sessions is the bounded session table. Lookups hash the cookie, so the
// table is keyed by digests: a timing difference in the map lookup says
// nothing about a valid id.
type sessions struct {
	max       int
	ttl, idle time.Duration

	mu sync.Mutex
	m  map[[sha256.Size]byte]*session
}

func newSessions(max int, ttl, idle time.Duration) *sessions {
	return &sessions{max: max, ttl: ttl, idle: idle, m: make(map[[sha256.Size]byte]*session, max)}
}

// alive reports whether s may still serve at now. A clock that moved
// backwards does not end a session.
func (t *sessions) alive(s *session, now time.Time) bool {
	return now.Sub(s.created) < t.ttl && now.Sub(s.lastSeen) < t.idle
}

// create starts a session and returns its id (for the cookie). A full
// table first drops expired sessions, then the least recently used one
// (returned as evicted, for the audit line). Only token holders create
// sessions, so the table is never filled by strangers.
func (t *sessions) create(now time.Time) (id string, s *session, evicted *session, err error) {
	var raw [sessionIDBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", nil, nil, err
	}
	id = base64.RawURLEncoding.EncodeToString(raw[:])
	s = &session{key: sha256.Sum256([]byte(id)), created: now, lastSeen: now}
	s.tag = hex.EncodeToString(s.key[:4])
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) >= t.max {
		var lru *session
		for k, o := range t.m {
			if !t.alive(o, now) {
				delete(t.m, k)
				continue
			}
			if lru == nil || o.lastSeen.Before(lru.lastSeen) {
				lru = o
			}
		}
		if len(t.m) >= t.max && lru != nil {
			delete(t.m, lru.key)
			evicted = lru
		}
	}
	t.m[s.key] = s
	return id, s, evicted, nil
}

// lookup returns the live session of a cookie value and marks it used,
// or nil. An expired session is removed.
func (t *sessions) lookup(id string, now time.Time) *session {
	if len(id) != sessionIDChars {
		return nil
	}
	key := sha256.Sum256([]byte(id))
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil {
		return nil
	}
	if !t.alive(s, now) {
		delete(t.m, key)
		return nil
	}
	if now.After(s.lastSeen) {
		s.lastSeen = now
	}
	return s
}

// valid reports whether s is still in the table and alive, without
// marking it used: an event stream checks its session every second, but
// only requests (the operator's, and the stream's reconnections) count
// as use.
func (t *sessions) valid(s *session, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[s.key] == s && t.alive(s, now)
}

// remove ends s; it reports whether s was live.
func (t *sessions) remove(s *session) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[s.key] != s {
		return false
	}
	delete(t.m, s.key)
	return true
}

// len returns the number of sessions held (live or not yet dropped).
func (t *sessions) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
