package main

import (
	"strconv"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// litInRows is a script counting the pixels of the console's canvas, in rows
// [y0, y1), that differ from its top-left pixel (the background).
const litInRows = `(function (y0, y1) {
	const c = document.querySelector("#console canvas");
	if (!c || c.width < 100) return -1;
	// A copy of its own, read once: the page's canvas is not read back.
	const copy = document.createElement("canvas");
	copy.width = c.width; copy.height = c.height;
	const ctx = copy.getContext("2d", { willReadFrequently: true });
	ctx.drawImage(c, 0, 0);
	const d = ctx.getImageData(0, y0, c.width, y1 - y0).data;
	const bg = ctx.getImageData(0, 0, 1, 1).data;
	let n = 0;
	for (let i = 0; i < d.length; i += 4) {
		if (d[i] !== bg[0] || d[i+1] !== bg[1] || d[i+2] !== bg[2]) n++;
	}
	return n;
})`

// TestUIBrowserConsoles (issue 21 item 4, "Done when"): VM 100's Console button
// opens noVNC on vmgate's WebSocket; the canvas shows the emulator's login prompt
// (pixels unlike the background in its line); typing hello and Enter changes
// that line. CT 200's console opens xterm.js; `echo hi` answers hi in its
// buffer. No console error and no CSP violation on the way (the browser's
// watcher fails the test on any).
func TestUIBrowserConsoles(t *testing.T) {
	t.Parallel()
	base := uiServer(t)
	b := newBrowser(t, base, 1280, 900)
	b.open("/vms/1/pve1/100")
	b.waitPath("/login")
	b.login("admin@vmgate.local", uiPassword)
	b.waitPath("/vms/1/pve1/100")
	b.click("link", "Console")
	b.waitPath("/vms/1/pve1/100/console")
	// The emulator's text console: row 0 a banner, row 2 the login prompt, in
	// cells 20 pixels high.
	b.waitJS("the login prompt on the canvas", litInRows+`(40, 60) > 0`)
	before := eval[int](b, litInRows+`(40, 60)`)
	b.shot("vm-console")
	clickAt(b, "#console canvas")
	typeKeys(b, "hello")
	b.waitJS("hello on the login line", litInRows+`(40, 60) > `+strconv.Itoa(before))
	typeKeys(b, "\r")
	b.waitJS("the next prompt", litInRows+`(60, 80) > 0`)
	b.shot("vm-console-typed")

	b.open("/cts/1/pve1/200")
	b.click("link", "Console")
	b.waitPath("/cts/1/pve1/200/console")
	xtermText := `(function () { const t = window.vmgateConsole; if (!t || !t.buffer) return "";
		const b = t.buffer.active; let s = "";
		for (let i = 0; i < b.length; i++) { const l = b.getLine(i); if (l) s += l.translateToString(true) + "\n"; }
		return s; })()`
	b.waitJS("the shell's prompt in xterm.js", xtermText+`.includes(":~# ")`)
	clickAt(b, "#console")
	typeKeys(b, "echo hi\r")
	b.waitJS("hi in xterm.js's buffer", xtermText+`.split("\n").some(l => l.trim() === "hi")`)
	b.shot("ct-console")
}

// clickAt clicks the middle of the element sel selects, as a mouse would.
func clickAt(b *browser, sel string) {
	b.t.Helper()
	xy := eval[[]float64](b, `(function () { const r = document.querySelector(`+strconv.Quote(sel)+`).getBoundingClientRect();
		return [r.left + r.width / 2, r.top + r.height / 2]; })()`)
	b.do("click "+sel, chromedp.MouseClickXY(xy[0], xy[1]))
}

// typeKeys types s as a keyboard does: a key down carrying its text and a key up
// for each character, Enter for "\r" (chromedp.KeyEvent adds a char event of its
// own, which a terminal takes as a second key press).
func typeKeys(b *browser, s string) {
	b.t.Helper()
	for _, r := range s {
		down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: string(r), Key: string(r)}
		if r == '\r' {
			down = input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: "\r", Key: "Enter", Code: "Enter",
				WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
		}
		up := down
		up.Type, up.Text = input.DispatchKeyEventTypeKeyUp, ""
		for _, ev := range []input.DispatchKeyEventParams{down, up} {
			if _, err := chromedp.Call(b.ctx, input.DispatchKeyEvent, ev); err != nil {
				b.t.Fatalf("type %q: %v", s, err)
			}
		}
	}
}
