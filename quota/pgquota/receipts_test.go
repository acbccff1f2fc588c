package pgquota_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
	"github.com/jackc/pgx/v5"
)

// A receipt binds the request it was counted for. The same key with the
// same fingerprint replays for free up to MaxReplays times, then is
// denied with DenialReplayLimit until the window ends; the same key with
// another fingerprint is DenialKeyReused, whatever the bucket's state.
// Neither denial consumes or writes anything.
func TestReceiptBindsFingerprint(t *testing.T) {
	e := newEnv(t)
	const maxReplays = 3
	s := e.open(t, e.runDSN, pgquota.Config{Operations: []quota.Operation{
		{Name: "export", Limit: 2, Window: time.Minute, MaxReplays: maxReplays}}})
	c := ctx(t)

	d, err := s.Consume(c, req("u", "k"))
	if err != nil || !d.Allowed || d.Replayed || d.Remaining != 1 || d.Window != time.Minute || d.Limit != 2 {
		t.Fatalf("first = %+v, %v", d, err)
	}
	for i := range maxReplays {
		d, err := s.Consume(c, req("u", "k"))
		if err != nil || !d.Allowed || !d.Replayed || d.Denial != quota.DenialNone || d.Remaining != 1 || d.Window != time.Minute {
			t.Fatalf("replay %d = %+v, %v; want allowed+replayed", i+1, d, err)
		}
		if got := e.bucket(t, req("u", "")); got.count != 1 || !slices.Equal(got.replays, []int16{int16(i + 1)}) {
			t.Fatalf("replay %d: durable %+v; want count 1 and replay count %d", i+1, got, i+1)
		}
	}
	before := e.bucket(t, req("u", ""))
	for range 3 {
		d, err = s.Consume(c, req("u", "k"))
		if err != nil || d.Allowed || d.Replayed || d.Denial != quota.DenialReplayLimit ||
			d.RetryAfter <= 0 || d.RetryAfter > time.Minute || d.Window != time.Minute {
			t.Fatalf("replay over the limit = %+v, %v; want DenialReplayLimit with 0 < RetryAfter <= 60s", d, err)
		}
	}

	// Another body, method or target under the same key: reused.
	for _, r := range []quota.Request{
		reqBody("u", "k", "another body"),
		func() quota.Request {
			r := req("u", "k")
			r.Fingerprint = quota.Fingerprint("PUT", "/v1/exports", [32]byte{1})
			return r
		}(),
	} {
		d, err = s.Consume(c, r)
		if err != nil || d.Allowed || d.Denial != quota.DenialKeyReused || d.Remaining != 1 {
			t.Fatalf("same key, other request = %+v, %v; want DenialKeyReused", d, err)
		}
	}
	if got := e.bucket(t, req("u", "")); !equalBuckets(got, before) {
		t.Fatalf("a denial wrote the bucket: %+v, was %+v", got, before)
	}

	// A second receipt fills the bucket; a reused key is still 422, not
	// 429, and a new key is exhausted.
	if d, err := s.Consume(c, req("u", "k2")); err != nil || !d.Allowed || d.Replayed || d.Remaining != 0 {
		t.Fatalf("second receipt = %+v, %v", d, err)
	}
	if d, err := s.Consume(c, reqBody("u", "k2", "x")); err != nil || d.Denial != quota.DenialKeyReused {
		t.Fatalf("reused key in a full bucket = %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("u", "k3")); err != nil || d.Denial != quota.DenialExhausted || d.Remaining != 0 || d.RetryAfter <= 0 {
		t.Fatalf("new key in a full bucket = %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("u", "k2")); err != nil || !d.Allowed || !d.Replayed || d.Remaining != 0 {
		t.Fatalf("replay in a full bucket = %+v, %v", d, err)
	}
	got := e.bucket(t, req("u", ""))
	if got.count != 2 || !slices.Equal(got.receipts, []string{"k", "k2"}) || !slices.Equal(got.replays, []int16{maxReplays, 1}) {
		t.Fatalf("durable bucket %+v", got)
	}
	fpK, fpK2 := req("u", "k").Fingerprint, req("u", "k2").Fingerprint
	if !bytes.Equal(got.fingerprints, append(fpK[:], fpK2[:]...)) {
		t.Fatalf("stored fingerprints %x", got.fingerprints)
	}

	// A store configured with more replays lets the bound receipt replay
	// again (the bound is read per call); fewer leaves it at the limit.
	more := e.open(t, e.runDSN, pgquota.Config{Operations: []quota.Operation{
		{Name: "export", Limit: 2, Window: time.Minute, MaxReplays: maxReplays + 1}}})
	if d, err := more.Consume(c, req("u", "k")); err != nil || !d.Replayed {
		t.Fatalf("raised MaxReplays = %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("u", "k")); err != nil || d.Denial != quota.DenialReplayLimit {
		t.Fatalf("replay count above MaxReplays = %+v, %v", d, err)
	}
}

// The window reset forgets the receipts with their bindings and replay
// counts: after it, the same key with another body is a new request.
func TestWindowResetForgetsBindings(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: []quota.Operation{{Name: "export", Limit: 2, MaxReplays: 1}}})
	c := ctx(t)
	for _, want := range []bool{false, true} {
		if d, err := s.Consume(c, req("u", "k")); err != nil || !d.Allowed || d.Replayed != want {
			t.Fatalf("fill: %+v, %v", d, err)
		}
	}
	if d, err := s.Consume(c, req("u", "k")); err != nil || d.Denial != quota.DenialReplayLimit {
		t.Fatalf("replay limit: %+v, %v", d, err)
	}
	e.super(t, `UPDATE bulwark.quota_buckets SET window_start = window_start - interval '61 seconds' WHERE subject_id = 'u'`)
	d, err := s.Consume(c, reqBody("u", "k", "another body"))
	if err != nil || !d.Allowed || d.Replayed || d.Remaining != 1 {
		t.Fatalf("same key, other body, new window = %+v, %v; want consumed", d, err)
	}
	got := e.bucket(t, req("u", ""))
	fp := reqBody("u", "k", "another body").Fingerprint
	if got.count != 1 || !bytes.Equal(got.fingerprints, fp[:]) || !slices.Equal(got.replays, []int16{0}) {
		t.Fatalf("durable bucket after the reset %+v", got)
	}
	if d, err := s.Consume(c, req("u", "k")); err != nil || d.Denial != quota.DenialKeyReused {
		t.Fatalf("the old body is now the other request: %+v, %v", d, err)
	}
}

// Two independent pools send 16 requests each, all at once, all with the
// SAME key and DIFFERENT fingerprints: exactly one is consumed and the 31
// others are DenialKeyReused, never two consumptions, in every round; the
// durable row holds one receipt bound to the winner's fingerprint.
func TestSameKeyDifferentFingerprintsConcurrently(t *testing.T) {
	e := newEnv(t)
	cfg := pgquota.Config{Operations: ops(8, time.Minute), MaxConns: 8}
	a, b := e.open(t, e.runDSN, cfg), e.open(t, e.runDSN, cfg)
	rounds := 30
	if testing.Short() {
		rounds = 8
	}
	for round := range rounds {
		subject := fmt.Sprintf("u-%d", round)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			winners []string
			reused  int
		)
		for i := range 32 {
			store := a
			if i%2 == 1 {
				store = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				body := fmt.Sprintf("body-%d", i)
				d, err := store.Consume(context.Background(), reqBody(subject, "same-key", body))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("round %d: Consume: %v", round, err)
				case d.Allowed && !d.Replayed:
					winners = append(winners, body)
				case d.Denial == quota.DenialKeyReused && d.Remaining == 7:
					reused++
				default:
					t.Errorf("round %d: %s: %+v; want consumed or key reused", round, body, d)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 || reused != 31 {
			t.Fatalf("round %d: %d consumed, %d reused; want 1 and 31", round, len(winners), reused)
		}
		got := e.bucket(t, req(subject, ""))
		fp := reqBody(subject, "same-key", winners[0]).Fingerprint
		if got.count != 1 || !slices.Equal(got.receipts, []string{"same-key"}) || !bytes.Equal(got.fingerprints, fp[:]) ||
			!slices.Equal(got.replays, []int16{0}) {
			t.Fatalf("round %d: durable %+v; want one receipt bound to %s", round, got, winners[0])
		}
	}
}

// A database at migration 1 with live rows (an empty bucket, a partly
// used one, a full one with the longest receipts) migrates to the current
// schema: every row keeps its count and receipts and gets one unbound
// fingerprint and a zero replay count per receipt; readiness passes; the
// first replay of an old receipt binds it, a different request under it is
// then reused; new receipts consume normally.
func TestMigrateFromVersion1WithLiveRows(t *testing.T) {
	e := newEnvAt(t, 1)
	c := ctx(t)
	long := func(i int) string { return fmt.Sprintf("%0128d", i) }
	full := make([]string, quota.MaxLimit)
	for i := range full {
		full[i] = long(i)
	}
	rows := []struct {
		subject  string
		receipts []string
	}{
		{"empty", nil},
		{"used", []string{"a", "b"}},
		{"full", full},
	}
	for _, r := range rows {
		ids := r.receipts
		if ids == nil {
			ids = []string{}
		}
		// The shape a version-1 binary writes: window start, count,
		// receipts, updated-at.
		e.super(t, `INSERT INTO bulwark.quota_buckets (project_id, subject_type, subject_id, operation,
			window_start, consumed_count, receipt_ids, updated_at)
			VALUES ('acme', 'user', $1, 'export', clock_timestamp(), $2, to_jsonb($3::text[]), clock_timestamp())`,
			r.subject, len(ids), ids)
	}

	res, err := pgquota.Migrate(c, e.migDSN, migrateCfg())
	ms, _ := pgquota.Migrations()
	if err != nil || res.From != 1 || res.To != len(ms) {
		t.Fatalf("Migrate from version 1 = %+v, %v; want 1 → %d", res, err, len(ms))
	}
	for _, r := range rows {
		got := e.bucket(t, req(r.subject, ""))
		n := len(r.receipts)
		if got.count != n || len(got.receipts) != n || !slices.Equal(got.receipts, r.receipts) && n > 0 ||
			!bytes.Equal(got.fingerprints, make([]byte, 32*n)) || !slices.Equal(got.replays, make([]int16, n)) {
			t.Fatalf("%s after the migration: count %d, %d receipts, %d fingerprint bytes, replays %v",
				r.subject, got.count, len(got.receipts), len(got.fingerprints), got.replays[:min(len(got.replays), 5)])
		}
	}

	s := e.open(t, e.runDSN, pgquota.Config{Operations: []quota.Operation{{Name: "export", Limit: quota.MaxLimit, MaxReplays: 2}}})
	if err := s.Check(c); err != nil {
		t.Fatalf("Check after the migration: %v", err)
	}
	// The first replay of an unbound receipt binds it ...
	if d, err := s.Consume(c, req("used", "a")); err != nil || !d.Allowed || !d.Replayed || d.Remaining != quota.MaxLimit-2 {
		t.Fatalf("first replay of an old receipt = %+v, %v", d, err)
	}
	// ... so the same key with another request is now reused, and the
	// bound request still replays.
	if d, err := s.Consume(c, reqBody("used", "a", "another body")); err != nil || d.Denial != quota.DenialKeyReused {
		t.Fatalf("old receipt, other request = %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("used", "a")); err != nil || !d.Replayed {
		t.Fatalf("old receipt, bound request = %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("used", "c")); err != nil || !d.Allowed || d.Replayed || d.Remaining != quota.MaxLimit-3 {
		t.Fatalf("new receipt = %+v, %v", d, err)
	}
	got := e.bucket(t, req("used", ""))
	fpA, fpC := req("used", "a").Fingerprint, req("used", "c").Fingerprint
	wantFP := slices.Concat(fpA[:], make([]byte, 32), fpC[:])
	if got.count != 3 || !bytes.Equal(got.fingerprints, wantFP) || !slices.Equal(got.replays, []int16{2, 0, 0}) {
		t.Fatalf("durable bucket %+v", got)
	}
	// The full bucket: a new receipt is exhausted, an old one replays and
	// an empty bucket consumes.
	if d, err := s.Consume(c, req("full", "new")); err != nil || d.Denial != quota.DenialExhausted {
		t.Fatalf("full bucket = %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("full", long(999))); err != nil || !d.Replayed {
		t.Fatalf("old receipt of the full bucket = %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("empty", "x")); err != nil || !d.Allowed || d.Replayed {
		t.Fatalf("empty bucket = %+v, %v", d, err)
	}
	// Migrating again is a no-op.
	if res, err := pgquota.Migrate(c, e.migDSN, migrateCfg()); err != nil || res.From != res.To {
		t.Fatalf("second Migrate = %+v, %v", res, err)
	}
}

// A binary that knows only migration 1 would see a newer database; this
// binary, on a database still at migration 1, fails readiness (the schema
// is behind) and every Consume fails closed.
func TestVersion1DatabaseIsNotReady(t *testing.T) {
	e := newEnvAt(t, 1)
	c := ctx(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: ops(5, time.Minute)})
	if err := s.Check(c); err == nil || !strings.Contains(err.Error(), "expects 2") {
		t.Fatalf("Check on a version-1 database = %v; want schema mismatch", err)
	}
	d, err := s.Consume(c, req("u", "r"))
	mustUnavailable(t, d, err, quota.ReasonServer)
}

// The row bounds of seed 001 hold with the new columns at their extreme:
// 1000 receipts of 128 bytes, each bound and replayed, stay within the
// 256 KiB row-size constraint, and the 1001st receipt is exhausted.
func TestFullRowWithinBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("1000 sequential decisions")
	}
	e := newEnv(t)
	s := e.open(t, e.runDSN, pgquota.Config{Operations: []quota.Operation{
		{Name: "export", Limit: quota.MaxLimit, Window: quota.MaxWindow, MaxReplays: quota.MaxMaxReplays}}})
	c := ctx(t)
	long := func(i int) string { return fmt.Sprintf("%0128d", i) }
	var wg sync.WaitGroup
	for w := range 4 { // four callers overlap their round trips
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < quota.MaxLimit; i += 4 {
				if d, err := s.Consume(c, req("u", long(i))); err != nil || !d.Allowed || d.Replayed {
					t.Errorf("receipt %d: %+v, %v", i, d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if d, err := s.Consume(c, req("u", long(0))); err != nil || !d.Replayed {
		t.Fatalf("replay of the first receipt: %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("u", long(quota.MaxLimit-1))); err != nil || !d.Replayed {
		t.Fatalf("replay of the last receipt: %+v, %v", d, err)
	}
	if d, err := s.Consume(c, req("u", long(quota.MaxLimit))); err != nil || d.Denial != quota.DenialExhausted {
		t.Fatalf("receipt 1001: %+v, %v", d, err)
	}
	// The largest replay count a row can hold also fits.
	e.super(t, `UPDATE bulwark.quota_buckets SET receipt_replays = array_fill(1000::smallint, ARRAY[1000]) WHERE subject_id = 'u'`)
	if d, err := s.Consume(c, req("u", long(5))); err != nil || d.Denial != quota.DenialReplayLimit {
		t.Fatalf("replay at the hard bound: %+v, %v", d, err)
	}
	conn, err := pgx.Connect(c, e.superDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var size int
	if err := conn.QueryRow(c, `SELECT octet_length(receipt_ids::text) + octet_length(receipt_fingerprints)
		+ 2 * cardinality(receipt_replays) FROM bulwark.quota_buckets WHERE subject_id = 'u'`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	t.Logf("receipt state of a full row: %d bytes (bound 262144)", size)
	if size > 256<<10 {
		t.Fatalf("full row holds %d bytes of receipts", size)
	}
	// The constraints refuse more than the hard bounds.
	for _, bad := range []struct{ set, constraint string }{
		{`receipt_replays = array_fill(1001::smallint, ARRAY[1000])`, "replays_match"},
		{`receipt_replays = array_fill(-1::smallint, ARRAY[1000])`, "replays_match"},
		{`receipt_replays[3] = NULL`, "replays_match"},
		{`receipt_replays = array_fill(0::smallint, ARRAY[1000], ARRAY[0])`, "replays_match"}, // 0-based
		{`receipt_fingerprints = receipt_fingerprints || '\x00'::bytea`, "fingerprints_match"},
		{`receipt_ids = jsonb_set(receipt_ids, '{0}', to_jsonb(repeat('x', 100000)))`, "row_size"}, // over 256 KiB
	} {
		_, err := conn.Exec(c, `UPDATE bulwark.quota_buckets SET `+bad.set+` WHERE subject_id = 'u'`)
		if err == nil || !strings.Contains(err.Error(), "23514") || !strings.Contains(err.Error(), "quota_buckets_"+bad.constraint) {
			t.Errorf("%s: %v; want a violation of quota_buckets_%s", bad.set, err, bad.constraint)
		}
	}
}

// equalBuckets compares two durable states.
func equalBuckets(a, b bucket) bool {
	return a.found == b.found && a.count == b.count && slices.Equal(a.receipts, b.receipts) &&
		bytes.Equal(a.fingerprints, b.fingerprints) && slices.Equal(a.replays, b.replays)
}
