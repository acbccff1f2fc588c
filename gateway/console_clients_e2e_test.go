package gateway

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/bulwarkhq/bulwark/control"
)

// TestConsoleTopClientsInChromium: in a real headless Chromium, the
// console's "Top limited clients" table shows a client the route limit
// refused by its fingerprint, layer and count; its Block button blocks
// the client (refused at connect, others served) and the deny list shows
// the entry by fingerprint; removing it through the page serves it
// again. The page never shows the address, and runs without a CSP
// violation or script error.
func TestConsoleTopClientsInChromium(t *testing.T) {
	ctx := browser(t)
	messages := collectConsole(ctx)
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	tg := startGateway(t, limitedRoute, map[string]string{"APP": up.URL},
		gwOpts{getenv: env(EnvControlToken, testToken).get, stateDir: dir})
	const abuser, other = "127.0.78.1", "127.0.78.2"
	for range 4 {
		fetchFrom(t, abuser, tg.url+"/")
	}
	fp := tg.g.fingerprint(netip.MustParseAddr(abuser))

	act(t, ctx, "log in",
		chromedp.Navigate(tg.control+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("login-form")),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("app")),
	)
	waitJS(t, ctx, "the limited client", `(() => { const r = document.querySelector('#top-clients tr'); return r && r.textContent.includes('`+fp+`') && r.textContent.includes('rate_limit') && r.children[2].textContent === '3'; })()`)

	act(t, ctx, "block it", chromedp.Click(chromedp.CSS(`#top-clients button[data-client="`+fp+`"]`)))
	waitJS(t, ctx, "the block", `document.getElementById('clients-msg').textContent.startsWith('Blocked client `+fp+` until')`)
	waitJS(t, ctx, "the deny list", `document.getElementById('list-deny').textContent.includes('client `+fp+`')`)
	assertRefused(t, abuser, hostPort(tg.url))
	// Saved for a restart, as the API's changes are.
	if b, err := os.ReadFile(listStatePath(dir, control.DefaultAddr)); err != nil || !strings.Contains(string(b), `"reason":"client:console"`) {
		t.Errorf("state file after the console's block: %v %s", err, b)
	}
	if s := fetchFrom(t, other, tg.url+"/"); s != 200 {
		t.Errorf("%s (not blocked): %d", other, s)
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil || strings.Contains(page, "127.0.78") {
		t.Fatalf("the page shows the address (%v):\n%s", err, page)
	}

	act(t, ctx, "unblock", chromedp.Click(chromedp.CSS(`#list-deny button[data-ip="client `+fp+`"]`)))
	waitJS(t, ctx, "the removal", `!document.getElementById('list-deny').textContent.includes('`+fp+`')`)
	if s := fetchFrom(t, abuser, tg.url+"/"); s != 429 {
		t.Errorf("%s after the removal: %d, want the route's 429", abuser, s)
	}
	for _, m := range messages() {
		s := m.String()
		if m.IsException() || strings.Contains(s, "Content Security Policy") || strings.Contains(s, "Trusted Type") || strings.Contains(s, "Refused to") || strings.Contains(s, "violates") {
			t.Errorf("browser console: %s:%d %s", m.URL, m.Line+1, s)
		}
	}
	logs := tg.logs.String()
	if !strings.Contains(logs, `"action":"block","target":"client:`+fp+`"`) || strings.Contains(logs, "127.0.78") {
		t.Errorf("audit lines: want the fingerprint, never the address:\n%s", logs)
	}
}
