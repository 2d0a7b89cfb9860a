package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/audits"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/testkit"
)

// The web UI's tests in a real browser (issue 11, docs/history.md): Debian's Chromium, driven over
// the DevTools protocol by chromedp, against the real binary in dev mode with the
// emulator at speed. Controls are found by their accessible role and name, as a
// person using a screen reader finds them, so the names the issue fixes (Email,
// Password, Log in, Start, Stop, Force stop, Reboot, Migrate, Target node, Start
// migration, Log out, the progressbar) are tested by every step. Every page visited
// is saved as a screenshot (to $VMGATE_SCREENSHOTS, or a temporary directory), and
// the console, uncaught exceptions, the Log domain, Audits issues and a
// securitypolicyviolation listener are watched: any error or CSP violation fails
// the test. No step asserts a time: waits poll until a deadline.

// uiPassword is the dev admin's password in these tests.
const uiPassword = "ui browser walk 7 lanterns"

// chromiumPath finds Debian's Chromium; without it the tests skip loudly, and fail
// under CI=true (.ci/run installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Chromium is not installed: the browser tests cannot run (apt-get install chromium)")
	}
	t.Skip("SKIPPED: Chromium is not installed; the web UI's browser tests did not run (apt-get install chromium)")
	return ""
}

// uiServer starts `vmgate server --dev` with the emulator at speed 10 (a live
// migration of VM 100 takes about two seconds, the ignored shutdown of VM 104 six)
// and returns its base URL.
func uiServer(t *testing.T) string {
	t.Helper()
	p := start(t, []string{"VMGATE_DEV_PASSWORD=" + uiPassword}, "server", "--dev", "--listen", "127.0.0.1:0",
		"--dev-speed", "10")
	base := p.line(t, listening)[1]
	// server --dev says where the UI is and how to log in.
	p.line(t, regexp.MustCompile(`^web UI: `+regexp.QuoteMeta(base)+`/ \(log in as admin@vmgate\.local, password \$VMGATE_DEV_PASSWORD\)$`))
	return base
}

// browser is one Chromium tab with what it saw.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string // screenshots

	mu       sync.Mutex
	problems []string // console errors, exceptions, CSP violations
	// expectFailedLoads is raised while a step provokes refused requests on
	// purpose: the "Failed to load resource" lines they log are expected then.
	expectFailedLoads bool
	shots             int
	prefix            string // of the screenshots' names: "" for the first tab, "tab2-", ...
	tabs              int    // tabs opened besides this one (newTab)
}

// screenshotDir is where the screenshots go: $VMGATE_SCREENSHOTS, or a directory
// of the test.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("VMGATE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// newBrowser starts Chromium with a fresh profile and the flags this machine needs
// (its closed network refuses the connections of background services).
func newBrowser(t *testing.T, base string, width, height int) *browser {
	t.Helper()
	exe := chromiumPath(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, base: base, dir: screenshotDir(t)}
	b.watchTab()
	return b
}

// newTab opens another tab of the same browser — the same cookies, so the same
// session — watched as the first one is; its screenshots are named tabN-….
func (b *browser) newTab() *browser {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	b.t.Cleanup(cancel)
	b.mu.Lock()
	b.tabs++
	prefix := fmt.Sprintf("tab%d-", b.tabs+1)
	b.mu.Unlock()
	nb := &browser{t: b.t, ctx: ctx, base: b.base, dir: b.dir, prefix: prefix}
	nb.watchTab()
	return nb
}

// watchTab starts watching the tab's console, exceptions, log, audits and CSP
// violations, and fails the test at its end on any.
func (b *browser) watchTab() {
	t, ctx := b.t, b.ctx
	t.Helper()
	if err := chromedp.Listen(ctx, b.watch); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	for _, enable := range []func() error{
		func() error { _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); return err },
		func() error { _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); return err },
		func() error { _, err := chromedp.Call(ctx, audits.Enable, cdp.Empty{}); return err },
		func() error {
			// A second witness of CSP violations, on every document before its own
			// scripts (DevTools' scripts are not subject to the page's CSP).
			_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
				Source: `document.addEventListener("securitypolicyviolation", function (e) {
					console.error("CSP violation: " + e.violatedDirective + " " + e.blockedURI);
				});
				// Every value a progress bar shows, for the test to read back: the
				// value the server rendered (the old value of the bar's first
				// change), then each one the page's script set.
				window.__progress = [];
				new MutationObserver(function (ms) {
					ms.forEach(function (m) {
						if (m.attributeName === "aria-valuenow" && m.target.getAttribute("role") === "progressbar") {
							if (!m.target.__progressSeen && m.oldValue !== null) {
								window.__progress.push(Number(m.oldValue));
							}
							m.target.__progressSeen = true;
							window.__progress.push(Number(m.target.getAttribute("aria-valuenow")));
						}
					});
				}).observe(document, {attributes: true, attributeOldValue: true, subtree: true, attributeFilter: ["aria-valuenow"]});`})
			return err
		},
	} {
		if err := enable(); err != nil {
			t.Fatalf("set up the tab: %v", err)
		}
	}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Errorf("browser: %s", p)
		}
		t.Logf("screenshots in %s", b.dir)
	})
}

// watch records every console error or warning, uncaught exception, error logged
// by the browser and issue Chromium's Audits domain raises (CSP violations
// among them).
func (b *browser) watch(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			b.problems = append(b.problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " ")))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.problems = append(b.problems, "uncaught exception: "+msg+" at "+d.URL)
	case *cdplog.EventEntryAdded:
		e := ev.Entry
		if e.Level != cdplog.EntryLevelError && e.Level != cdplog.EntryLevelWarning {
			return
		}
		if b.expectFailedLoads && e.Source == cdplog.EntrySourceNetwork {
			return
		}
		b.problems = append(b.problems, fmt.Sprintf("log %s/%s: %s (%s)", e.Source, e.Level, e.Text, e.URL))
	case *audits.EventIssueAdded:
		details, _ := json.Marshal(ev.Issue.Details)
		b.problems = append(b.problems, fmt.Sprintf("issue %s: %s", ev.Issue.Code, details))
	}
}

// do runs actions in the tab and fails the test on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// open loads a page of the UI.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path))
}

// eval runs a script in the page and decodes its value.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// shot saves a screenshot of the whole page as <test>-NN-name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	b.shots++
	test := strings.ToLower(strings.TrimPrefix(b.t.Name(), "TestUIBrowser"))
	path := filepath.Join(b.dir, fmt.Sprintf("%s-%s%02d-%s.png", test, b.prefix, b.shots, name))
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// path is the path of the page the tab shows.
func (b *browser) path() string {
	return strings.TrimPrefix(eval[string](b, "location.pathname + location.search"), b.base)
}

// axNodes finds the elements with an accessible role and name that assistive
// technology sees (ignored nodes left out).
func (b *browser) axNodes(role, name string) []*accessibility.Node {
	b.t.Helper()
	return b.axNodesIn("document", role, name)
}

// axNodesIn is axNodes below the element the script root names.
func (b *browser) axNodesIn(root, role, name string) []*accessibility.Node {
	b.t.Helper()
	doc, err := chromedp.Run(b.ctx, chromedp.Evaluate[*runtime.RemoteObject](root))
	if err != nil || doc == nil || doc.ObjectID == "" {
		return nil // the page is changing; the caller polls
	}
	res, err := chromedp.Call(b.ctx, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{
		ObjectID: doc.ObjectID, Role: role, AccessibleName: name})
	if err != nil {
		return nil
	}
	var out []*accessibility.Node
	for _, n := range res.Nodes {
		if !n.Ignored && n.BackendDOMNodeID != 0 {
			out = append(out, n)
		}
	}
	return out
}

// wait polls cond until it holds or the deadline passes, and says how long
// that took (for a log, never an assertion).
func (b *browser) wait(what string, cond func() bool) time.Duration {
	b.t.Helper()
	return testkit.Eventually(b.t, what, func() error {
		if !cond() {
			return fmt.Errorf("not yet (page %s)", b.path())
		}
		return nil
	})
}

// find waits for exactly one element with the role and name.
func (b *browser) find(role, name string) cdp.BackendNodeID {
	b.t.Helper()
	return b.findIn("document", role, name)
}

// findIn waits for exactly one element with the role and name below the
// element the script root names.
func (b *browser) findIn(root, role, name string) cdp.BackendNodeID {
	b.t.Helper()
	var id cdp.BackendNodeID
	b.wait(fmt.Sprintf("one %s named %q in %s", role, name, root), func() bool {
		ns := b.axNodesIn(root, role, name)
		if len(ns) == 1 {
			id = ns[0].BackendDOMNodeID
			return true
		}
		return false
	})
	return id
}

// has says whether an element with the role and name is on the page now.
func (b *browser) has(role, name string) bool { return len(b.axNodes(role, name)) > 0 }

// click clicks the element with the role and name as a mouse would, in its middle.
// A live page may swap the region that holds the element between the finding and
// the click (the node is then detached): it is found again in the new region.
func (b *browser) click(role, name string) {
	b.t.Helper()
	b.clickIn("document", role, name)
}

// clickIn is click on the one element with the role and name below the element
// the script root names (a page may offer the same button in two places).
func (b *browser) clickIn(root, role, name string) {
	b.t.Helper()
	var x, y float64
	testkit.Eventually(b.t, fmt.Sprintf("the place of %s %q", role, name), func() error {
		id := b.findIn(root, role, name)
		if _, err := chromedp.Call(b.ctx, dom.ScrollIntoViewIfNeeded, dom.ScrollIntoViewIfNeededParams{BackendNodeID: id}); err != nil {
			return fmt.Errorf("scroll to it: %w", err)
		}
		box, err := chromedp.Call(b.ctx, dom.GetBoxModel, dom.GetBoxModelParams{BackendNodeID: id})
		if err != nil {
			return fmt.Errorf("its box: %w", err)
		}
		q := box.Model.Content
		x, y = (q[0]+q[2]+q[4]+q[6])/4, (q[1]+q[3]+q[5]+q[7])/4
		return nil
	})
	b.do(fmt.Sprintf("click %s %q", role, name), chromedp.MouseClickXY(x, y))
}

// waitJS waits until the script's value is true in a page that has loaded
// whole: one evaluation sees one state of the page, never a page half parsed
// or half swapped, so a condition over several elements holds for all of them
// at once.
func (b *browser) waitJS(what, js string) time.Duration {
	b.t.Helper()
	return b.wait(what, func() bool {
		v, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.readyState === "complete" && !!(`+js+`)`))
		return err == nil && v
	})
}

// typeInto focuses the field with the role and name and types text.
func (b *browser) typeInto(role, name, text string) {
	b.t.Helper()
	id := b.find(role, name)
	if _, err := chromedp.Call(b.ctx, dom.Focus, dom.FocusParams{BackendNodeID: id}); err != nil {
		b.t.Fatalf("focus %s %q: %v", role, name, err)
	}
	b.do("type into "+name, chromedp.KeyEvent(text))
}

// choose picks an option of the select with the accessible name.
func (b *browser) choose(name, value string) {
	b.t.Helper()
	id := b.find("combobox", name)
	obj, err := chromedp.Call(b.ctx, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: id})
	if err != nil {
		b.t.Fatal(err)
	}
	_, err = chromedp.Call(b.ctx, runtime.CallFunctionOn, runtime.CallFunctionOnParams{ObjectID: obj.Object.ObjectID,
		FunctionDeclaration: `function (v) { this.value = v; this.dispatchEvent(new Event("change", {bubbles: true})); }`,
		Arguments:           []*runtime.CallArgument{{Value: mustJSON(value)}}})
	if err != nil {
		b.t.Fatalf("choose %s in %q: %v", value, name, err)
	}
}

// attr reads an attribute of the element with the role and name.
func (b *browser) attr(role, name, attr string) string {
	b.t.Helper()
	id := b.find(role, name)
	obj, err := chromedp.Call(b.ctx, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: id})
	if err != nil {
		return ""
	}
	res, err := chromedp.Call(b.ctx, runtime.CallFunctionOn, runtime.CallFunctionOnParams{ObjectID: obj.Object.ObjectID,
		FunctionDeclaration: `function (a) { return this.getAttribute(a) || ""; }`, ReturnByValue: new(true),
		Arguments: []*runtime.CallArgument{{Value: mustJSON(attr)}}})
	if err != nil || res.Result == nil {
		return ""
	}
	var s string
	json.Unmarshal(res.Result.Value, &s)
	return s
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return f
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// text is the page's visible text.
func (b *browser) text() string {
	return eval[string](b, "document.body ? document.body.innerText : ''")
}

// waitText waits for the page to show s.
func (b *browser) waitText(s string) {
	b.t.Helper()
	b.wait(fmt.Sprintf("the text %q", s), func() bool {
		v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
		return err == nil && strings.Contains(v, s)
	})
}

// waitPath waits for the tab to show a page whose path starts with prefix.
func (b *browser) waitPath(prefix string) {
	b.t.Helper()
	b.wait("page "+prefix, func() bool {
		v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string]("document.readyState === 'complete' ? location.pathname + location.search : ''"))
		return err == nil && strings.HasPrefix(v, prefix)
	})
}

// login logs in through the form, by the fields' names.
func (b *browser) login(email, password string) {
	b.t.Helper()
	b.typeInto("textbox", "Email", email)
	b.typeInto("textbox", "Password", password)
	b.click("button", "Log in")
}

// expectRefused runs a step that provokes refused requests on purpose: the
// browser's "Failed to load resource" lines for them are no problem.
func (b *browser) expectRefused(step func()) {
	b.t.Helper()
	b.mu.Lock()
	b.expectFailedLoads = true
	b.mu.Unlock()
	step()
	// The log line of the refused load comes after the answer; one more round trip
	// to the tab lets it arrive while it is expected.
	b.text()
	b.mu.Lock()
	b.expectFailedLoads = false
	b.mu.Unlock()
}

// post sends a POST from the page's own script context (same origin, the
// session's cookie) and returns the status; withCSRF adds the page's token.
func (b *browser) post(path string, withCSRF bool) (status int) {
	b.t.Helper()
	js := fmt.Sprintf(`(async () => {
		const body = new URLSearchParams();
		if (%t) { body.set("csrf", document.querySelector("input[name=csrf]").value); }
		const r = await fetch(%q, {method: "POST", body: body, redirect: "manual", credentials: "same-origin"});
		return r.type === "opaqueredirect" ? 303 : r.status;
	})()`, withCSRF, path)
	b.expectRefused(func() { status = eval[int](b, js) })
	return status
}

// TestUIBrowserWalk walks the README's walk in the browser as the dev admin: log
// in, the fleet, VMs 100–105, start 101, migrate 100 to pve2 watching the
// progress bar rise to 100 and the VM's node change, stop 104 gracefully (its
// guest ignores it: shutdown_timeout) then force it off, the admin pages, a POST
// without the CSRF token refused, and log out (the back button shows the log-in
// page).
func TestUIBrowserWalk(t *testing.T) {
	t.Parallel()
	base := uiServer(t)
	b := newBrowser(t, base, 1280, 900)

	// Log in: a page first asked for leads to the log-in page and back.
	b.open("/vms?status=running")
	b.waitPath("/login")
	b.shot("login")
	b.typeInto("textbox", "Email", "admin@vmgate.local")
	b.typeInto("textbox", "Password", "not the password")
	b.expectRefused(func() {
		b.click("button", "Log in") // answered 401, which the browser logs
		b.waitText("Wrong e-mail address or password.")
	})
	b.shot("login-error")
	// The form keeps the e-mail; type the right password.
	b.typeInto("textbox", "Password", uiPassword)
	b.click("button", "Log in")
	b.waitPath("/vms?status=running")

	// The browser holds the session cookie HttpOnly and SameSite=Strict, for the
	// whole site; the JSON API does not take it (the browser sends it with this
	// same-origin request).
	cookies, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range cookies.Cookies {
		if c.Name == "vmgate_session" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict || session.Path != "/" {
		t.Errorf("the session cookie as the browser keeps it: %+v", session)
	}
	b.expectRefused(func() {
		if s := eval[int](b, `fetch("/api/v1/user/me", {credentials: "same-origin"}).then(r => r.status)`); s != 401 {
			t.Errorf("the API with the UI's cookie answered %d", s)
		}
	})

	// The fleet.
	b.open("/")
	b.waitText("pve3")
	for _, s := range []string{"dev", "online", "pve1", "pve2", "running", "stopped"} {
		if !strings.Contains(b.text(), s) {
			t.Errorf("the fleet page does not show %q", s)
		}
	}
	b.shot("fleet")

	// VMs 100–105.
	b.open("/vms")
	b.waitText("12 of 12 guests") // dev's 10 and dev-b's VM 300 and CT 310
	for vmid := 100; vmid <= 105; vmid++ {
		if !b.has("link", strconv.Itoa(vmid)) {
			t.Errorf("the VM list has no link to VM %d", vmid)
		}
	}
	b.shot("vms")

	// Start 101 and see it running.
	b.open("/vms/1/pve1/101")
	b.find("button", "Start")
	if b.has("button", "Stop") || b.has("button", "Migrate") == false {
		t.Error("a stopped VM offers Stop, or no Migrate")
	}
	b.click("button", "Start")
	// The page answers at once with the running task and follows it: the task's
	// end and the guest's new state may come in different renders (the state is
	// the inventory's, up to its age later), so wait for both, read together.
	b.waitPath("/vms/1/pve1/101?task=")
	b.waitJS("VM 101 started and shown running", `document.querySelector("#inline-task[data-result=ok]") &&
		document.getElementById("inline-task").innerText.includes("VM 101 started.") &&
		document.getElementById("vm-status").innerText.includes("running")`)
	b.find("button", "Stop")
	if b.has("button", "Start") {
		t.Error("a running VM still offers Start")
	}
	b.shot("vm-started")

	// Migrate 100 to pve2 and watch it.
	b.open("/vms/1/pve1/100")
	b.click("button", "Migrate")
	b.waitPath("/vms/1/pve1/100/migrate")
	b.find("combobox", "Target node")
	b.shot("migrate")
	b.choose("Target node", "pve2")
	b.click("button", "Start migration")
	b.waitPath("/tasks/UPID:pve1:")
	first := b.attr("progressbar", "Migration progress", "aria-valuenow")
	shot := false
	b.wait("the progress bar at 100", func() bool {
		v := b.attr("progressbar", "Migration progress", "aria-valuenow")
		if !shot && v != first && v != "100" {
			b.shot("migration-running")
			shot = true
		}
		return v == "100"
	})
	// Every value the bar showed, in order, from the server's rendering on
	// (window.__progress, kept by the page's observer): it never goes down and
	// ends at 100. first is no witness of the server's value: on a busy machine
	// it is read after the stream has moved the bar several times.
	seen := eval[[]float64](b, "window.__progress")
	if len(seen) == 0 { // the server rendered the end: the bar never changed
		seen = []float64{mustFloat(t, first)}
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Errorf("the percent went down: %v", seen)
		}
	}
	if seen[len(seen)-1] != 100 {
		t.Errorf("the bar ended at %v", seen)
	}
	t.Logf("percent seen: %v", seen)
	b.waitText("VM 100 is now on pve2")
	b.shot("migration-done")
	b.click("link", "pve2")
	b.waitPath("/vms/1/pve2/100")
	if got := eval[string](b, `document.getElementById("vm-node").innerText`); got != "pve2" {
		t.Errorf("VM 100's node after the migration: %q", got)
	}
	b.shot("vm-migrated")

	// Stop 104 gracefully: its guest ignores it.
	b.open("/vms/1/pve3/104")
	b.click("button", "Stop")
	b.waitJS("shutdown_timeout with Force stop", `document.getElementById("inline-task").innerText.includes("shutdown_timeout")`)
	b.shot("vm-shutdown-timeout")
	// The outcome offers Force stop; the actions offer it too while the VM runs.
	b.clickIn(`document.getElementById("inline-task")`, "button", "Force stop")
	b.waitPath("/vms/1/pve3/104/force-stop")
	b.shot("force-stop-confirm")
	b.click("button", "Force stop")
	b.waitPath("/vms/1/pve3/104?task=")
	b.waitJS("VM 104 powered off and shown stopped", `document.querySelector("#inline-task[data-result=ok]") &&
		document.getElementById("inline-task").innerText.includes("VM 104 powered off.") &&
		document.getElementById("vm-status").innerText.includes("stopped")`)
	b.shot("vm-force-stopped")

	// The task list.
	b.open("/tasks")
	b.waitText("qmigrate")
	b.shot("tasks")

	// The admin pages: create an operator, grant them the cluster, see it audited.
	b.open("/admin/users")
	b.typeInto("textbox", "E-mail", "otto@example.com")
	b.typeInto("textbox", "Name", "Otto")
	b.typeInto("textbox", "Password", "copper meadow 5 herons")
	b.click("button", "Create user")
	b.waitText("User otto@example.com created.")
	b.shot("admin-user")
	b.open("/admin/grants")
	b.choose("User", eval[string](b, `[...document.querySelectorAll("#grant-user option")].find(o => o.text === "otto@example.com").value`))
	b.choose("Role", "operator")
	b.click("button", "Save grant")
	b.waitText("Grant saved.")
	b.shot("admin-grants")
	b.open("/admin/clusters/1")
	b.waitText("Endpoints vmgate knows")
	b.shot("admin-cluster")
	b.open("/admin/audit?action=grant.put")
	b.waitText("grant.put")
	b.shot("admin-audit")

	// A POST without the CSRF token is refused, one with it is not.
	if got := b.post("/vms/1/pve1/101/reboot", false); got != 403 {
		t.Errorf("a POST without the CSRF token answered %d, want 403", got)
	}

	// Log out; the back button shows the log-in page.
	b.open("/account")
	b.shot("account")
	b.click("button", "Log out")
	b.waitPath("/login")
	b.do("back", chromedp.NavigateBack())
	b.waitPath("/login")
	b.find("button", "Log in")
	b.shot("after-logout-back")
}

// TestUIBrowserViewer: a viewer sees the VMs and no action button, and a POST
// from the viewer's own session, with its CSRF token, is refused; on a phone-sized
// screen in dark mode the pages still work (and are shot), none wider than the
// screen. No console error, no CSP violation.
func TestUIBrowserViewer(t *testing.T) {
	t.Parallel()
	base := uiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := checkedClient(t, base, "")
	if _, err := admin.Login(ctx, "admin@vmgate.local", uiPassword); err != nil {
		t.Fatal(err)
	}
	const viewerPassword = "quiet harbour 9 willows"
	u, err := admin.CreateUser(ctx, client.UserCreate{Email: "vera@example.com", Nickname: "Vera", Password: viewerPassword,
		Role: "user"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutGrant(ctx, 1, u.ID, "viewer"); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, base, 500, 900)
	b.do("a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	// In the dark: the pages follow prefers-color-scheme.
	if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
		t.Fatal(err)
	}
	b.open("/vms/1/pve1/100")
	b.waitPath("/login")
	b.shot("phone-login")
	b.login("vera@example.com", viewerPassword)
	b.waitPath("/vms/1/pve1/100")
	b.waitText("web1")
	for _, name := range []string{"Start", "Stop", "Force stop", "Reboot", "Migrate", "Move to another cluster"} {
		if b.has("button", name) {
			t.Errorf("the viewer is offered %s", name)
		}
	}
	b.shot("phone-viewer-vm")
	if got := b.post("/vms/1/pve1/100/stop", true); got != 403 {
		t.Errorf("the viewer's POST with its CSRF token answered %d, want 403", got)
	}
	if got := eval[string](b, `fetch("/vms/1/pve1/100").then(r => r.text()).then(t => /running/.test(t) ? "running" : "?")`); got != "running" {
		t.Errorf("VM 100 after the viewer's POST: %s", got)
	}
	b.open("/vms")
	b.waitText("10 of 10 guests") // dev's alone: the viewer has no grant on dev-b
	b.shot("phone-vms")
	b.open("/")
	b.waitText("pve1")
	b.shot("phone-fleet")
	for _, path := range []string{"/", "/vms", "/vms/1/pve1/100", "/tasks", "/account"} {
		b.open(path)
		b.waitPath(path)
		if w := eval[int](b, "document.documentElement.scrollWidth"); w > 390 {
			t.Errorf("%s is %d px wide on a 390 px screen", path, w)
		}
	}
}
