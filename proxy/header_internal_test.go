package proxy

import (
	"net/http"
	"net/textproto"
	"reflect"
	"testing"

	"github.com/bulwarkhq/bulwark/h1"
)

// header builds what textproto's canonical keys and per-field copies
// build, for common names in any case, repeated names and others.
func TestHeaderAsTextproto(t *testing.T) {
	fields := []h1.Field{
		{Name: []byte("content-type"), Value: []byte("text/plain")},
		{Name: []byte("CONTENT-LENGTH"), Value: []byte("100")},
		{Name: []byte("Set-Cookie"), Value: []byte("a=1")},
		{Name: []byte("set-cookie"), Value: []byte("b=2")},
		{Name: []byte("x-custom_name"), Value: []byte("")},
		{Name: []byte("eTaG"), Value: []byte(`"v1"`)},
		{Name: []byte("Dat\xe9"), Value: []byte("x")},
		{Name: []byte("via"), Value: []byte("1.1 a")},
	}
	want := http.Header{}
	for _, f := range fields {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		want[k] = append(want[k], string(f.Value))
	}
	got := header(fields)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("header:\n got %q\nwant %q", got, want)
	}
	// Appending to one field's values leaves the others as they are.
	got["Content-Type"] = append(got["Content-Type"], "more")
	if got.Get("Content-Length") != "100" {
		t.Fatalf("append to one field changed another: %q", got)
	}
	if len(header(nil)) != 0 {
		t.Fatal("no fields: want an empty header")
	}
}

func BenchmarkHeader(b *testing.B) {
	fields := []h1.Field{
		{Name: []byte("Content-Type"), Value: []byte("text/plain")},
		{Name: []byte("Content-Length"), Value: []byte("100")},
		{Name: []byte("Date"), Value: []byte("Mon, 07 Dec 2026 16:00:00 GMT")},
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = header(fields)
	}
}
