package rls

import (
	"errors"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/keyed"
)

// Listener is where and how the RLS server is served: the gateway's rls
// section (the yaml tags are its keys). The files it names are read by
// the caller (the gateway's Provision): ConfigFile with [ParseConfig],
// TokenFile for [RequireToken], the TLS files for the gRPC credentials.
type Listener struct {
	// Addr (addr) is host:port of the gRPC listener; "" (the default)
	// turns the server off. Beyond loopback it needs TokenFile or
	// TLS.ClientCAFile: the protocol has no authentication of its own
	// (see [CheckAddr]).
	Addr string `yaml:"addr"`
	// ConfigFile (config_file) holds the domains, in envoyproxy/ratelimit's
	// format; required with Addr. A reload re-reads it; unchanged limits
	// keep their state.
	ConfigFile string `yaml:"config_file"`
	// MaxKeys (max_keys) bounds the server's own table of keys in this
	// replica (its clients choose the descriptor values), apart from the
	// global limiter's other keys, so that it never crowds them out.
	// Range [1, keyed.MaxCapacity].
	MaxKeys int `yaml:"max_keys"`
	// TokenFile (token_file) holds a bearer token that every call must
	// carry as "authorization: Bearer <token>" metadata (Envoy: the rate
	// limit service's grpc_service.initial_metadata).
	TokenFile string `yaml:"token_file"`
	// TLS (tls) serves gRPC over TLS; with a client CA, mutual TLS.
	TLS *ListenerTLS `yaml:"tls"`
}

// ListenerTLS names the listener's certificate and key files (PEM) and,
// for mutual TLS, the CA that signs its clients' certificates.
type ListenerTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, when set, makes every client present a certificate
	// signed by one of its CAs (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

// Validate checks l without reading a file: nothing when Addr is empty
// (off); else the address, a config file, MaxKeys, the TLS pair, and no
// unauthenticated listener beyond loopback. The error is a conf.Errors
// naming each problem by its key, of kind ErrConfig.
func (l Listener) Validate() error {
	if l.Addr == "" {
		return nil
	}
	f := conf.Check{Kind: ErrConfig}
	if err := conf.HostPort(l.Addr); err != nil {
		f.Add("addr", "%q: %v", l.Addr, err)
	}
	if l.ConfigFile == "" {
		f.Add("config_file", "required when addr is set")
	}
	f.Int("max_keys", int64(l.MaxKeys), 1, keyed.MaxCapacity)
	if t := l.TLS; t != nil {
		if t.CertFile == "" {
			f.Add("tls.cert_file", "required when tls is set")
		}
		if t.KeyFile == "" {
			f.Add("tls.key_file", "required when tls is set")
		}
	}
	mtls := l.TLS != nil && l.TLS.ClientCAFile != ""
	if err := CheckAddr(l.Addr, l.TokenFile != "" || mtls); errors.Is(err, ErrExposed) {
		f.Add("addr", "%q is not a loopback address and the RLS protocol has no authentication: set token_file or tls.client_ca_file (mutual TLS)", l.Addr)
	}
	return f.Err()
}
