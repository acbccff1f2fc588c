package quota_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
)

func valid() quota.Request {
	return quota.Request{Project: "p-1", SubjectType: "user", SubjectID: "u:42", Operation: "plugin-package.propose", ReceiptID: "01J9Z_abc.def-1",
		Fingerprint: quota.Fingerprint("POST", "/v1/packages", sha256.Sum256([]byte(`{"name":"x"}`)))}
}

func TestValidate(t *testing.T) {
	if err := quota.Validate(valid()); err != nil {
		t.Fatalf("valid request: %v", err)
	}
	max := strings.Repeat("a", quota.MaxReceiptIDBytes)
	r := valid()
	r.ReceiptID, r.Project = max, strings.Repeat("P", quota.MaxIDBytes)
	if err := quota.Validate(r); err != nil {
		t.Fatalf("maximal lengths: %v", err)
	}
	cases := []struct {
		name  string
		edit  func(*quota.Request)
		field string
	}{
		{"empty project", func(r *quota.Request) { r.Project = "" }, "project"},
		{"long project", func(r *quota.Request) { r.Project = strings.Repeat("a", quota.MaxIDBytes+1) }, "project"},
		{"space subject type", func(r *quota.Request) { r.SubjectType = "us er" }, "subject type"},
		{"unicode subject id", func(r *quota.Request) { r.SubjectID = "ü" }, "subject id"},
		{"slash operation", func(r *quota.Request) { r.Operation = "a/b" }, "operation"},
		{"empty receipt", func(r *quota.Request) { r.ReceiptID = "" }, "receipt id"},
		{"long receipt", func(r *quota.Request) { r.ReceiptID = max + "b" }, "receipt id"},
		{"quote receipt", func(r *quota.Request) { r.ReceiptID = `a"b` }, "receipt id"},
		{"nul receipt", func(r *quota.Request) { r.ReceiptID = "a\x00b" }, "receipt id"},
		{"sql receipt", func(r *quota.Request) { r.ReceiptID = "x');DROP TABLE t;--" }, "receipt id"},
		{"newline receipt", func(r *quota.Request) { r.ReceiptID = "a\nb" }, "receipt id"},
		{"zero fingerprint", func(r *quota.Request) { r.Fingerprint = [32]byte{} }, "fingerprint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := valid()
			c.edit(&r)
			err := quota.Validate(r)
			var ie *quota.InvalidRequestError
			if !errors.As(err, &ie) || !errors.Is(err, quota.ErrInvalidRequest) {
				t.Fatalf("got %v, want *InvalidRequestError", err)
			}
			if ie.Field != c.field {
				t.Fatalf("field %q, want %q", ie.Field, c.field)
			}
			if !strings.HasPrefix(err.Error(), "quota: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			// The value never appears in the error.
			v := map[string]string{"project": r.Project, "subject type": r.SubjectType,
				"subject id": r.SubjectID, "operation": r.Operation, "receipt id": r.ReceiptID}[c.field]
			if len(v) > 3 && strings.Contains(err.Error(), v) {
				t.Fatalf("error %q repeats the value", err)
			}
		})
	}
}

func TestOperationConfig(t *testing.T) {
	ops, err := quota.NewOperations(
		quota.Operation{Name: "propose", Limit: 30},
		quota.Operation{Name: "inspect", Limit: quota.MaxLimit, Window: quota.MaxWindow},
	)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := ops.Lookup("propose"); !ok || o.Window != quota.DefaultWindow || o.Limit != 30 || o.MaxReplays != quota.DefaultMaxReplays {
		t.Fatalf("propose = %+v, %v; want default window 60s and %d replays", o, ok, quota.DefaultMaxReplays)
	}
	if ops.Len() != 2 {
		t.Fatalf("Len = %d", ops.Len())
	}
	bad := []struct {
		ops  []quota.Operation
		want string
	}{
		{nil, "operations: none configured"},
		{[]quota.Operation{{Name: "x", Limit: quota.MaxLimit + 1}}, "operation x limit: 1001 out of range [1, 1000]"},
		{[]quota.Operation{{Name: "x", Limit: 0}}, "operation x limit: 0 out of range [1, 1000]"},
		{[]quota.Operation{{Name: "x", Limit: 1, Window: quota.MaxWindow + time.Second}}, "operation x window: 5m1s out of range [1s, 5m0s]"},
		{[]quota.Operation{{Name: "x", Limit: 1, Window: 500 * time.Millisecond}}, "operation x window: 500ms out of range [1s, 5m0s]"},
		{[]quota.Operation{{Name: "x", Limit: 1, Window: time.Second + time.Microsecond}}, "not a whole number of milliseconds"},
		{[]quota.Operation{{Name: "", Limit: 1}}, "operation name: empty"},
		{[]quota.Operation{{Name: "a b", Limit: 1}}, "operation name: byte 1 outside"},
		{[]quota.Operation{{Name: "x", Limit: 1}, {Name: "x", Limit: 2}}, "operation x: configured twice"},
		{[]quota.Operation{{Name: "x", Limit: 1, MaxReplays: quota.MaxMaxReplays + 1}}, "operation x max replays: 1001 out of range [1, 1000]"},
		{[]quota.Operation{{Name: "x", Limit: 1, MaxReplays: -1}}, "operation x max replays: -1 out of range [1, 1000]"},
	}
	for _, b := range bad {
		_, err := quota.NewOperations(b.ops...)
		if !errors.Is(err, quota.ErrConfig) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("NewOperations(%+v) = %v, want ErrConfig containing %q", b.ops, err, b.want)
		}
	}
	if ops, err := quota.NewOperations(quota.Operation{Name: "x", Limit: 1, MaxReplays: quota.MaxMaxReplays},
		quota.Operation{Name: "y", Limit: 1, MaxReplays: 1}); err != nil {
		t.Fatalf("MaxReplays at its bounds: %v", err)
	} else if x, _ := ops.Lookup("x"); x.MaxReplays != quota.MaxMaxReplays {
		t.Fatalf("x = %+v", x)
	}
	many := make([]quota.Operation, quota.MaxOperations+1)
	for i := range many {
		many[i] = quota.Operation{Name: fmt.Sprintf("op%d", i), Limit: 1}
	}
	if _, err := quota.NewOperations(many...); !errors.Is(err, quota.ErrConfig) {
		t.Fatalf("too many operations: %v", err)
	}
}

func TestResolve(t *testing.T) {
	ops, err := quota.NewOperations(quota.Operation{Name: "plugin-package.propose", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := ops.Resolve(valid()); err != nil || o.Limit != 3 {
		t.Fatalf("Resolve = %+v, %v", o, err)
	}
	r := valid()
	r.Operation = "export"
	if _, err := ops.Resolve(r); !errors.Is(err, quota.ErrUnknownOperation) {
		t.Fatalf("unknown operation: %v", err)
	}
	r.ReceiptID = ""
	if _, err := ops.Resolve(r); !errors.Is(err, quota.ErrInvalidRequest) {
		t.Fatalf("validation must come first: %v", err)
	}
	var nilOps *quota.Operations
	if _, err := nilOps.Resolve(valid()); !errors.Is(err, quota.ErrUnknownOperation) {
		t.Fatalf("nil set: %v", err)
	}
}

func TestUnavailableError(t *testing.T) {
	e := quota.Unavailable(quota.ReasonTimeout, "57014", "", fmt.Errorf("wrapped: %w", context.DeadlineExceeded))
	if !errors.Is(e, quota.ErrUnavailable) || !errors.Is(e, context.DeadlineExceeded) {
		t.Fatalf("%v must match ErrUnavailable and DeadlineExceeded", e)
	}
	if e.Error() != "quota: unavailable: timeout (sqlstate 57014)" {
		t.Fatalf("Error() = %q", e.Error())
	}
	secret := errors.New("failed to connect to user=admin password=hunter2 host=db")
	e = quota.Unavailable(quota.ReasonUnreachable, "", "", secret)
	if errors.Unwrap(e) != nil || strings.Contains(e.Error(), "hunter2") || errors.Is(e, secret) {
		t.Fatalf("a non-context cause must be dropped: %v", e)
	}
	if !errors.Is(quota.Unavailable(quota.ReasonCanceled, "", "", context.Canceled), context.Canceled) {
		t.Fatal("canceled cause lost")
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	cases := []struct {
		d    quota.Decision
		want int64
	}{
		{quota.Decision{Allowed: true, RetryAfter: time.Second}, 0},
		{quota.Decision{RetryAfter: 0}, 1},
		{quota.Decision{RetryAfter: time.Millisecond}, 1},
		{quota.Decision{RetryAfter: time.Second}, 1},
		{quota.Decision{RetryAfter: time.Second + time.Nanosecond}, 2},
		{quota.Decision{RetryAfter: 59*time.Second + 1}, 60},
	}
	for _, c := range cases {
		if got := c.d.RetryAfterSeconds(); got != c.want {
			t.Errorf("%+v: RetryAfterSeconds = %d, want %d", c.d, got, c.want)
		}
	}
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{"", "a", "01J9Z_abc.def-1", "a b", "ü", strings.Repeat("x", 129), "a\x00", "k:v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := valid()
		r.ReceiptID = s
		err := quota.Validate(r)
		ok := len(s) >= 1 && len(s) <= quota.MaxReceiptIDBytes
		for i := 0; ok && i < len(s); i++ {
			c := s[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0
		}
		if ok != (err == nil) {
			t.Fatalf("Validate(%q) = %v, want ok=%v", s, err, ok)
		}
		if err != nil && !errors.Is(err, quota.ErrInvalidRequest) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

// The encoding of Fingerprint is pinned: stores keep fingerprints for a
// window, so a silent change would turn every retry in flight during an
// upgrade into a 422. The expected value is computed independently here
// from the documented encoding.
func TestFingerprintEncoding(t *testing.T) {
	body := sha256.Sum256([]byte(`{"a":1}`))
	var enc []byte
	enc = append(enc, "bulwark/quota/request-fingerprint/v1\x00"...)
	enc = append(enc, 0, 0, 0, 0, 0, 0, 0, 4)
	enc = append(enc, "POST"...)
	enc = append(enc, 0, 0, 0, 0, 0, 0, 0, 17)
	enc = append(enc, "/api/exports?x=1y"...)
	enc = append(enc, body[:]...)
	want := sha256.Sum256(enc)
	if got := quota.Fingerprint("POST", "/api/exports?x=1y", body); got != want {
		t.Fatalf("Fingerprint = %x, want %x", got, want)
	}
}

// fingerprintGolden is Fingerprint("POST", "/v1/exports?format=csv",
// sha256("{}")) as computed by the first release of the encoding.
const fingerprintGolden = "d14ec00a254d83a09c0fe462d6a33b07f9df9c82c3e343a6f8f3808c428143a3"

// A fixed vector, so a change of the encoding cannot pass unnoticed even
// if the test above were edited along with it.
func TestFingerprintGolden(t *testing.T) {
	got := quota.Fingerprint("POST", "/v1/exports?format=csv", sha256.Sum256([]byte("{}")))
	if hex.EncodeToString(got[:]) != fingerprintGolden {
		t.Fatalf("Fingerprint = %x, want %s", got, fingerprintGolden)
	}
}

// Every component separates: moving bytes between method and target,
// changing the query, the method's case or one body byte changes the
// fingerprint.
func TestFingerprintSeparates(t *testing.T) {
	empty := sha256.Sum256(nil)
	one := sha256.Sum256([]byte("x"))
	fps := map[[32]byte]string{}
	for _, c := range []struct {
		name, method, target string
		body                 [32]byte
	}{
		{"base", "GET", "/x", empty},
		{"shifted boundary", "GE", "T/x", empty},
		{"shifted boundary 2", "GET/", "x", empty},
		{"lower-case method", "get", "/x", empty},
		{"query", "GET", "/x?a=1", empty},
		{"other query", "GET", "/x?a=2", empty},
		{"body", "GET", "/x", one},
		{"empty method", "", "GET/x", empty},
		{"trailing nul", "GET\x00", "/x", empty},
	} {
		fp := quota.Fingerprint(c.method, c.target, c.body)
		if prev, dup := fps[fp]; dup {
			t.Fatalf("%s and %s share a fingerprint", c.name, prev)
		}
		if fp == ([32]byte{}) {
			t.Fatalf("%s: zero fingerprint", c.name)
		}
		fps[fp] = c.name
	}
}

func TestDenialString(t *testing.T) {
	for d, want := range map[quota.Denial]string{
		quota.DenialNone: "none", quota.DenialExhausted: "exhausted",
		quota.DenialKeyReused: "key_reused", quota.DenialReplayLimit: "replay_limit", 99: "unknown",
	} {
		if d.String() != want {
			t.Errorf("Denial(%d).String() = %q, want %q", d, d.String(), want)
		}
	}
}

// FuzzFingerprint: two different (method, target, body) triples never
// share a fingerprint, and equal triples always do. A collision here would
// mean the encoding is ambiguous (SHA-256 itself does not collide).
func FuzzFingerprint(f *testing.F) {
	f.Add("GET", "/x", "", "GE", "T/x", "")
	f.Add("POST", "/a?b", "body", "POST", "/a?b", "bodz")
	f.Add("", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, m1, t1, b1, m2, t2, b2 string) {
		fp1 := quota.Fingerprint(m1, t1, sha256.Sum256([]byte(b1)))
		fp2 := quota.Fingerprint(m2, t2, sha256.Sum256([]byte(b2)))
		same := m1 == m2 && t1 == t2 && b1 == b2
		if same != (fp1 == fp2) {
			t.Fatalf("(%q,%q,%q) vs (%q,%q,%q): equal inputs %v, equal fingerprints %v", m1, t1, b1, m2, t2, b2, same, fp1 == fp2)
		}
	})
}
