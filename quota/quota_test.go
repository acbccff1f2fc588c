package quota_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
)

func valid() quota.Request {
	return quota.Request{Project: "p-1", SubjectType: "user", SubjectID: "u:42", Operation: "plugin-package.propose", ReceiptID: "01J9Z_abc.def-1"}
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
	if o, ok := ops.Lookup("propose"); !ok || o.Window != quota.DefaultWindow || o.Limit != 30 {
		t.Fatalf("propose = %+v, %v; want default window 60s", o, ok)
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
	}
	for _, b := range bad {
		_, err := quota.NewOperations(b.ops...)
		if !errors.Is(err, quota.ErrConfig) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("NewOperations(%+v) = %v, want ErrConfig containing %q", b.ops, err, b.want)
		}
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
