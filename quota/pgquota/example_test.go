package pgquota_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
	"github.com/bulwarkhq/bulwark/wire"
)

// Configuration is validated before any connection is made; errors name
// the setting and its allowed range and never the connection string.
func ExampleOpen_config() {
	dsn := "postgres://bulwark_runtime:secret@db.internal/app?sslmode=verify-full"
	_, err := pgquota.Open(context.Background(), dsn, pgquota.Config{
		Operations: []quota.Operation{{Name: "export", Limit: 5000}},
	})
	fmt.Println(err, errors.Is(err, quota.ErrConfig))

	_, err = pgquota.Open(context.Background(), "postgres://bulwark_runtime:secret@db.internal/app?sslmode=disable",
		pgquota.Config{Operations: []quota.Operation{{Name: "export", Limit: 5}}})
	fmt.Println(err)

	ms, _ := pgquota.Migrations()
	for _, m := range ms {
		fmt.Println("embedded migration", m.Version, m.Name)
	}
	// Output:
	// quota: operation export limit: 5000 out of range [1, 1000] true
	// pgquota: connection string: TLS must be sslmode=verify-full unless InsecureAllowNoTLS is set
	// embedded migration 1 0001_quota_buckets.sql
	// embedded migration 2 0002_receipt_bindings.sql
}

// The whole wiring: migrate with the migration role (normally
// "bulwark migrate"), open with the runtime role, gate readiness on Check,
// consume after authentication and policy, answer with the wire mapping.
func Example() {
	ctx := context.Background()
	if _, err := pgquota.Migrate(ctx, os.Getenv("BULWARK_MIGRATION_DSN"),
		pgquota.MigrateConfig{RuntimeRole: "bulwark_runtime"}); err != nil {
		fmt.Println(err)
		return
	}
	store, err := pgquota.Open(ctx, os.Getenv("BULWARK_QUOTA_DSN"), pgquota.Config{
		Operations: []quota.Operation{
			{Name: "plugin-package.propose", Limit: 30},
			{Name: "plugin-package.decide", Limit: 60},
			{Name: "plugin-package.inspect", Limit: 600, Window: time.Minute},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	if err := store.Check(ctx); err != nil { // host readiness check
		fmt.Println(err)
		return
	}

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The body is read (bounded) before the quota is charged, so that
		// the receipt binds exactly what the handler will act on.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err != nil {
			wire.Write(w, wire.New(wire.CodePayloadTooLarge))
			return
		}
		target := r.URL.EscapedPath()
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		d, err := store.Consume(r.Context(), quota.Request{
			Project:     "acme", // from the authenticated request
			SubjectType: "user", // from the authenticated request
			SubjectID:   "u-42", // from the authenticated request
			Operation:   "plugin-package.propose",
			ReceiptID:   r.Header.Get("Idempotency-Key"), // the client reuses it on retries
			Fingerprint: quota.Fingerprint(r.Method, target, sha256.Sum256(body)),
		})
		// 429 quota_exceeded or idempotency_replay_limit, 422
		// idempotency_key_reused, 503 quota_unavailable, 400.
		if quota.Reject(w, r, d, err) {
			return
		}
		// d.Replayed: the same request was already admitted; answer it
		// as the first time (nothing was charged again).
		w.WriteHeader(http.StatusAccepted)
	})
	_ = handler
}
