package gateway

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/redis/go-redis/v9"
)

// Client fingerprints
//
// The access log, the control API's audit lines and the console's top
// limited clients name a client by a fingerprint, never by its address:
// the grouped client address (IPv4 as is, IPv6 by client_ip.ipv6_prefix)
// as 16 bytes (IPv4-mapped for IPv4), encrypted as one AES-128 block,
// in hex (32 digits). The same client has the same fingerprint wherever
// it is written; without the key nobody can turn it back into an address
// or test a guess.
//
// The gateway holds the key, so it can decrypt a fingerprint it wrote:
// `bulwark ctl block --client FP` (and the control API and console the
// same) blocks the address behind it, and the lists show such an entry by
// its fingerprint, never its prefix. No table is involved: a fingerprint
// stays actionable for as long as the key lives, whatever the number of
// clients seen since. A decrypted block must be a grouped client (an
// IPv4-mapped address, or an IPv6 address with no bit past
// client_ip.ipv6_prefix): anything else, a mistyped or forged value, is
// refused (with a /64 grouping a forged value passes with probability
// 2^-64). A fingerprint written under another IPv6 grouping is refused
// the same way once the grouping changed.
//
// The key (fingerprintKey):
//   - standalone: a key file beside the control token, in the state
//     directory (Deps.StateDir, fingerprint.key), created at the first
//     start with mode 0600 (atomically: written aside, then linked into
//     place, so two gateways starting at once agree on one key), read at
//     every later start: fingerprints stay valid across reloads and
//     restarts. Without a state directory the key is made per process.
//   - cluster: one key in Redis (fingerprintRedisKey), set by the first
//     replica that starts (SET NX) and read by every other, so a
//     fingerprint one replica logged means the same on every replica and
//     can be blocked through any of them. Redis rather than the
//     configuration: the cluster profile always has Redis, every replica
//     reaches the same one, and an operator has no further secret to
//     generate and distribute. Redis unreachable at start: the file (or
//     process) key serves and a warning says fingerprints are not shared
//     until a restart with Redis up.
//
// The key material is a control-token-shaped string (43 characters of
// base64url from 32 random bytes); the AES key is its SHA-256, first 16
// bytes, under a domain-separating prefix.

// FingerprintKeyFile is the name of the fingerprint key file in the state
// directory.
const FingerprintKeyFile = "fingerprint.key"

// fingerprintRedisKey holds the cluster's fingerprint key material.
const fingerprintRedisKey = "bulwark:fingerprint:key"

// fingerprintKeyTimeout bounds reading the cluster's key at start.
const fingerprintKeyTimeout = 5 * time.Second

// ErrUnknownClient is matched (errors.Is) by the error for a fingerprint
// that this gateway's key does not turn into a client.
var ErrUnknownClient = control.ErrUnknownClient

// fingerprintKey is one key and where it came from.
type fingerprintKey struct {
	block  cipher.Block
	source string // process, file or redis
}

func newFingerprintKey(material, source string) *fingerprintKey {
	sum := sha256.Sum256([]byte("bulwark/fingerprint/v1\x00" + material))
	b, _ := aes.NewCipher(sum[:16]) // a 16-byte key never fails
	return &fingerprintKey{block: b, source: source}
}

// loadFingerprintKey sets the key of a standalone gateway (or the
// cluster's until Redis answered): the state directory's key file,
// created when missing, else a key for this process.
func (g *Gateway) loadFingerprintKey() error {
	if g.deps.StateDir == "" {
		var k [32]byte
		_, _ = crand.Read(k[:]) // never fails (crypto/rand since Go 1.24)
		g.fpKey.Store(newFingerprintKey(hex.EncodeToString(k[:]), "process"))
		return nil
	}
	path := filepath.Join(g.deps.StateDir, FingerprintKeyFile)
	m, err := control.LoadOrCreateKeyFile(path)
	if err != nil {
		return fmt.Errorf("gateway: fingerprint key: %w", err)
	}
	g.fpKey.Store(newFingerprintKey(m, "file"))
	return nil
}

// shareFingerprintKey replaces the key by the cluster's, from Redis
// (set by the first replica). On failure the current key keeps serving.
func (g *Gateway) shareFingerprintKey(ctx context.Context, rc redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(ctx, fingerprintKeyTimeout)
	defer cancel()
	mine, err := control.GenerateToken()
	if err == nil {
		err = rc.SetNX(ctx, fingerprintRedisKey, mine, 0).Err()
	}
	var m string
	if err == nil {
		m, err = rc.Get(ctx, fingerprintRedisKey).Result()
	}
	if err == nil && len(m) < control.MinTokenBytes {
		err = errors.New("the stored key is too short")
	}
	if err != nil {
		g.log.Warn("fingerprint key not shared through Redis: fingerprints are this replica's own until a restart with Redis reachable",
			"error", errorReason(err))
		return
	}
	g.fpKey.Store(newFingerprintKey(m, "redis"))
}

// fingerprintBlock returns the current key's cipher.
func (g *Gateway) fingerprintBlock() cipher.Block {
	if k := g.fpKey.Load(); k != nil {
		return k.block
	}
	g.keyOnce.Do(func() {
		if g.fpKey.Load() == nil {
			var k [32]byte
			_, _ = crand.Read(k[:])
			g.fpKey.CompareAndSwap(nil, newFingerprintKey(hex.EncodeToString(k[:]), "process"))
		}
	})
	return g.fpKey.Load().block
}

// fingerprint is a client's fingerprint as the access log writes it, for
// a grouped client address; "-" for none.
func (g *Gateway) fingerprint(a netip.Addr) string {
	if !a.IsValid() {
		return "-"
	}
	var out [16]byte
	in := a.As16()
	g.fingerprintBlock().Encrypt(out[:], in[:])
	return hex.EncodeToString(out[:])
}

// clientPrefix turns a fingerprint back into the prefix of the client it
// names: an IPv4 address (/32) or an IPv6 group (/ipv6_prefix as
// configured now). It returns an error matching ErrUnknownClient for
// anything this gateway did not write.
func (g *Gateway) clientPrefix(fp string) (netip.Prefix, error) {
	if len(fp) != 32 {
		return netip.Prefix{}, ErrUnknownClient
	}
	var in, out [16]byte
	if _, err := hex.Decode(in[:], []byte(fp)); err != nil {
		return netip.Prefix{}, ErrUnknownClient
	}
	g.fingerprintBlock().Decrypt(out[:], in[:])
	a := netip.AddrFrom16(out)
	if a.Is4In6() {
		return netip.PrefixFrom(a.Unmap(), 32), nil
	}
	bits := 0
	if cfg := g.Config(); cfg != nil {
		bits = cfg.ClientIP.IPv6Prefix
	}
	if bits == 0 {
		bits = peer.DefaultIPv6Prefix
	}
	p := netip.PrefixFrom(a, bits)
	if p.Masked().Addr() != a {
		return netip.Prefix{}, ErrUnknownClient
	}
	return p, nil
}
