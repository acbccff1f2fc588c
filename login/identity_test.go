package login_test

import (
	"context"
	"encoding/base64"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// TestFolding: by default ("unicode") the fullwidth, upper-case and
// compatibility spellings of an account are the account, in the limiter
// and in the lockout; with FoldLower only the lower-case spellings are.
func TestFolding(t *testing.T) {
	for in, want := range map[string]string{
		"ｃarol": "carol", "CAROL": "carol", "ＣＡＲＯＬ": "carol", "\u3000carol\u3000": "carol",
		"Straße": "strasse", "ﬁona": "fiona", "Émile": "émile", "ǅemal": "džemal",
	} {
		if got := login.FoldUnicode.Normalize(in); got != want {
			t.Errorf("FoldUnicode.Normalize(%q) = %q, want %q", in, got, want)
		}
		if got := login.NormalizeUsername(in); got != want {
			t.Errorf("NormalizeUsername(%q) = %q, want %q", in, got, want)
		}
	}
	if got := login.FoldLower.Normalize(" ｃarol "); got != "ｃarol" {
		t.Errorf("FoldLower.Normalize = %q", got)
	}
	for _, fold := range []login.Folding{login.FoldUnicode, login.FoldLower} {
		t.Run(fold.String(), func(t *testing.T) {
			clk := clock.NewManual(t0)
			l := newLimiter(t, login.Config{Limit: 3, Store: newMemoryStore(t, clk), Folding: fold})
			evaluate(t, l, "192.0.2.1", "carol")
			d := evaluate(t, l, "192.0.2.1", "ｃarol")
			d2 := evaluate(t, l, "192.0.2.1", "CAROL")
			shared := d.Remaining == 1 && d2.Remaining == 0
			if fold == login.FoldUnicode && !shared {
				t.Errorf("ｃarol and CAROL do not share carol's budget: %+v %+v", d, d2)
			}
			if fold == login.FoldLower && (d.Remaining != 2 || d2.Remaining != 1) {
				t.Errorf("FoldLower: ｃarol should have its own budget, CAROL carol's: %+v %+v", d, d2)
			}
			lo := newLockout(t, login.LockoutConfig{MaxFailures: 2, Store: newMemoryLockoutStore(t, clk), Folding: fold})
			ctx := context.Background()
			lo.RecordFailure(ctx, "carol")
			st, _ := lo.RecordFailure(ctx, "ｃａｒｏｌ")
			if st.Locked != (fold == login.FoldUnicode) {
				t.Errorf("lockout after carol + ｃａｒｏｌ: locked %v", st.Locked)
			}
		})
	}
	if _, err := login.New(login.Config{Store: login.Disabled{}, Folding: 7}); err == nil {
		t.Error("Folding 7 accepted")
	}
	if err := (login.LockoutConfig{Folding: 7}).Validate(); err == nil {
		t.Error("LockoutConfig.Folding 7 accepted")
	}
}

// TestReadCredentialsPassword: the password field is looked for in every
// place the username is; an empty one is no password; Basic counts only
// with BasicAuth.
func TestReadCredentialsPassword(t *testing.T) {
	mp := func(fields ...string) (string, string) {
		var b strings.Builder
		w := multipart.NewWriter(&b)
		for i := 0; i+1 < len(fields); i += 2 {
			w.WriteField(fields[i], fields[i+1])
		}
		w.Close()
		return b.String(), w.FormDataContentType()
	}
	mpWith, mpCT := mp("username", "bob", "password", "pw")
	mpEmpty, mpEmptyCT := mp("username", "bob", "password", "")
	for _, c := range []struct {
		name, target, ct, body, auth string
		basic, want                  bool
	}{
		{"query", "/login?username=bob&password=x", "", "", "", false, true},
		{"query without", "/login?username=bob", "", "", "", false, false},
		{"query empty", "/login?username=bob&password=", "", "", "", false, false},
		{"query case and escapes", "/login?username=bob&Pass%77ord=x", "", "", "", false, true},
		{"json", "/login", "application/json", `{"username":"bob","password":"x"}`, "", false, true},
		{"json empty", "/login", "application/json", `{"username":"bob","password":""}`, "", false, false},
		{"json not a string", "/login", "application/json", `{"username":"bob","password":null}`, "", false, false},
		{"form", "/login", "application/x-www-form-urlencoded", "username=bob&password=x", "", false, true},
		{"multipart", "/login", mpCT, mpWith, "", false, true},
		{"multipart empty", "/login", mpEmptyCT, mpEmpty, "", false, false},
		{"basic", "/login", "", "", "Basic " + basic("bob", "pw"), true, true},
		{"basic empty password", "/login", "", "", "Basic " + basic("bob", ""), true, false},
		{"basic not read", "/login?username=bob", "", "", "Basic " + basic("bob", "pw"), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", c.target, strings.NewReader(c.body))
			if c.ct != "" {
				r.Header.Set("Content-Type", c.ct)
			}
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			cr, err := login.ReadCredentials(r, login.UsernameOptions{BasicAuth: c.basic})
			if err != nil || cr.Username != "bob" || cr.Password != c.want {
				t.Errorf("%+v %v, want bob with password %v", cr, err, c.want)
			}
		})
	}
	r := httptest.NewRequest("POST", "/login?username=bob&pw=x", nil)
	if cr, _ := login.ReadCredentials(r, login.UsernameOptions{PasswordField: "pw"}); !cr.Password {
		t.Error("PasswordField pw not read")
	}
	if err := (login.UsernameOptions{PasswordField: "username"}).Validate(); err == nil {
		t.Error("a PasswordField equal to the username field accepted")
	}
	if err := (login.UsernameOptions{PasswordField: "pass word"}).Validate(); err == nil {
		t.Error("a PasswordField with a space accepted")
	}
}

// TestLockoutClearedOnlyByLoginAttempts: a 2xx to a request without a
// password (a login page fetched with ?username=victim) leaves the
// failure count alone; a 2xx to one with a password clears it; a 403
// counts as a failure like a 401.
func TestLockoutClearedOnlyByLoginAttempts(t *testing.T) {
	clk := clock.NewManual(t0)
	lo := newLockout(t, login.LockoutConfig{MaxFailures: 3, Store: newMemoryLockoutStore(t, clk)})
	l := newLimiter(t, login.Config{Limit: 100, Store: newMemoryStore(t, clk), Lockout: lo})
	mw, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("password") {
		case "right", "":
			w.WriteHeader(200) // the right password, or the login page
		case "forbidden":
			w.WriteHeader(403)
		default:
			w.WriteHeader(401)
		}
	}))
	send := func(target string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		return rec.Code
	}
	send("/login?username=victim&password=wrong")
	send("/login?username=victim&password=forbidden")
	if c := send("/login?username=victim"); c != 200 {
		t.Fatalf("login page: %d", c)
	}
	send("/login?username=victim&password=wrong")
	if c := send("/login?username=victim&password=right"); c != 429 {
		t.Fatalf("after 401, 403, a page view and 401: %d, want the account locked", c)
	}

	// A success with a password does clear the count.
	send("/login?username=other&password=wrong")
	send("/login?username=other&password=wrong")
	send("/login?username=other&password=right")
	send("/login?username=other&password=wrong")
	if c := send("/login?username=other&password=wrong"); c != 401 {
		t.Fatalf("after a real success the count restarts: %d", c)
	}
}

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
