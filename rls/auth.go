package rls

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ErrExposed is wrapped by [CheckAddr]'s error for a listener beyond
// loopback that nothing secures.
var ErrExposed = errors.New("rls: unauthenticated listener beyond loopback")

// CheckAddr refuses to serve the RLS on addr (host:port) beyond loopback
// unless secured reports mutual TLS or a token: anyone who reaches an
// open RLS can drain any descriptor's limit with hits_addend and fill its
// key table. "localhost" and loopback addresses are accepted without; an
// empty host (every interface) is not loopback.
func CheckAddr(addr string, secured bool) error {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("rls: address %q: %v", addr, err)
	}
	if secured || h == "localhost" {
		return nil
	}
	if a, err := netip.ParseAddr(h); err == nil && a.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %q; configure mutual TLS or a token", ErrExposed, addr)
}

// healthPrefix is the gRPC health service, answered without a token (it
// tells only SERVING or NOT_SERVING, and probes cannot send one).
const healthPrefix = "/grpc.health.v1.Health/"

// RequireToken returns the server options (unary and stream interceptors)
// that accept a call only when its metadata carries "authorization:
// Bearer <token>", compared in constant time; anything else is answered
// codes.Unauthenticated with a fixed message, before the request is
// looked at. The health service is exempt. Envoy sends the header with
// the rate limit service's grpc_service.initial_metadata.
func RequireToken(token string) []grpc.ServerOption {
	want := sha256.Sum256([]byte(token))
	check := func(ctx context.Context, method string) error {
		if strings.HasPrefix(method, healthPrefix) {
			return nil
		}
		if !tokenOK(ctx, &want) {
			return status.Error(codes.Unauthenticated, "rls: missing or wrong bearer token")
		}
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// tokenOK reports whether exactly one authorization value is present and
// is "Bearer " followed by the token (digests compared in constant time,
// so the comparison time tells nothing about the token or its length).
func tokenOK(ctx context.Context, want *[sha256.Size]byte) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return false
	}
	v := vals[0]
	const scheme = "bearer "
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return false
	}
	got := sha256.Sum256([]byte(v[len(scheme):]))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
