package wire_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/wire"
)

// TestWireDoc: docs/wire.md has one row per problem code of the
// registry, with the status the code is sent with, and no other code.
func TestWireDoc(t *testing.T) {
	const path = "../docs/wire.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]int{}
	for n, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Errorf("%s:%d: %d cells, want 4 (code, status, sent by, meaning)", path, n+1, len(cells))
			continue
		}
		code := strings.Trim(strings.TrimSpace(cells[0]), "`")
		status, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		if err != nil {
			t.Errorf("%s:%d: status %q", path, n+1, cells[1])
		}
		if _, dup := documented[code]; dup {
			t.Errorf("%s:%d: %s documented twice", path, n+1, code)
		}
		documented[code] = status
		if strings.TrimSpace(cells[3]) == "" {
			t.Errorf("%s:%d: %s has no meaning", path, n+1, code)
		}
	}
	var missing []string
	for _, code := range wire.Codes() {
		want, detail, _ := wire.Lookup(code)
		got, ok := documented[code]
		switch {
		case !ok:
			missing = append(missing, "| `"+code+"` | "+strconv.Itoa(want)+" | | "+detail+" |")
		case got != want:
			t.Errorf("%s: %s is documented with status %d; it is sent with %d", path, code, got, want)
		}
		delete(documented, code)
	}
	if len(missing) > 0 {
		t.Errorf("%s lacks %d code(s); add these rows (say which layer sends it):\n%s", path, len(missing), strings.Join(missing, "\n"))
	}
	for code := range documented {
		t.Errorf("%s documents %q, which is not a code (wire.Codes)", path, code)
	}
}
