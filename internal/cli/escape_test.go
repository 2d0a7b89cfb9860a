package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vmgate/vmgate/client"
)

// The hostile texts of docs/security.md item 35: a window title change, a screen clear and
// an OSC 8 link whose text hides where it goes.
const (
	osTitle   = "\x1b]0;x\x07"
	clear     = "\x1b[2J"
	osc8      = "\x1b]8;;https://evil.example/\x1b\\click-me\x1b]8;;\x1b\\"
	osTitleEs = `\x1b]0;x\x07`
	clearEs   = `\x1b[2J`
	osc8Es    = `\x1b]8;;https://evil.example/\x1b\click-me\x1b]8;;\x1b\`
)

// TestEscape (docs/security.md item 35): every character a terminal acts on comes out as
// text a person reads; everything else comes out as it went in.
func TestEscape(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"web-01", "web-01"},
		{"café ✓ 日本", "café ✓ 日本"},
		{"a\\b", "a\\b"},
		{"\ufffd", "\ufffd"}, // the replacement character itself is text
		{osTitle, osTitleEs},
		{clear, clearEs},
		{osc8, osc8Es},
		{"a\tb\nc\rd", `a\tb\nc\rd`},
		{"\x00\x08\x7f", `\x00\x08\x7f`},
		{"\u009b2J", `\u009b2J`}, // C1 CSI, which some terminals obey
		{"\u0085next", `\u0085next`},
		{"invoice\u202efdp.exe", `invoice\u202efdp.exe`}, // right-to-left override
		{"\u2066x\u2069\u200e\u061c", `\u2066x\u2069\u200e\u061c`},
		{"line\u2028sep", `line\u2028sep`},
		{"bad \xff\xfe utf8 \xe2\x82", `bad \xff\xfe utf8 \xe2\x82`},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzEscape: whatever goes in, what comes out is UTF-8 without a control
// character, and text without one comes out unchanged.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{osTitle, clear, osc8, "plain", "\xff", "\u202e", "é\x1b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Escape(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Escape(%q) = %q: not UTF-8", s, out)
		}
		for _, r := range out {
			if needsEscape(r, utf8.RuneLen(r)) {
				t.Fatalf("Escape(%q) = %q holds %U", s, out, r)
			}
		}
		clean := true
		for i, r := range s {
			_, size := utf8.DecodeRuneInString(s[i:])
			clean = clean && !needsEscape(r, size)
		}
		if clean && out != s {
			t.Fatalf("Escape(%q) = %q changed clean text", s, out)
		}
	})
}

// noTerminalControls fails when out holds a control character (line ends
// excepted) that is not one of the view's own, allowed.
func noTerminalControls(t *testing.T, what, out string, allowed ...string) {
	t.Helper()
	for _, a := range allowed {
		out = strings.ReplaceAll(out, a, "")
	}
	for _, r := range out {
		if r != '\n' && needsEscape(r, utf8.RuneLen(r)) {
			t.Errorf("%s writes %U to the terminal:\n%q", what, r, out)
			return
		}
	}
}

// TestTablesAndViewsEscapeWhatTheyShow (docs/security.md item 35): a VM's name and tags, a
// task's target and error, an operation item's name and error, shown in the
// tables and the progress views (plain and on a terminal), reach the terminal
// escaped; the views' own cursor movements are the only sequences written.
func TestTablesAndViewsEscapeWhatTheyShow(t *testing.T) {
	t.Parallel()
	hostile := osTitle + clear + osc8
	escaped := osTitleEs + clearEs + osc8Es

	var b bytes.Buffer
	vms := VMsTable([]client.VMView{{VMID: 100, Name: hostile, Node: "pve1", Status: "running", Tags: []string{clear, osc8}}})
	vms.Wide = true // whole values: the escaped text is looked for below
	vms.Write(&b)
	noTerminalControls(t, "vm list", b.String())
	if !strings.Contains(b.String(), escaped) || !strings.Contains(b.String(), clearEs+","+osc8Es) {
		t.Errorf("vm list does not show the name and tags escaped:\n%s", b.String())
	}
	if len(columns(t, b.String())[1]) != 9 {
		t.Errorf("the escaped name broke the columns:\n%s", b.String())
	}

	fail := "TASK ERROR: " + hostile
	task := client.Task{TaskID: ptr("UPID:pve1:1"), Type: "qmigrate", VMID: ptr[int64](100), Target: &hostile, Status: "stopped",
		Result: "failed", Error: &fail, ExitStatus: &fail}
	if s := Summary(task, ""); strings.Contains(Escape(s), "\x1b") || !strings.Contains(Escape(s), escaped) {
		t.Errorf("summary %q", Escape(s))
	}
	for _, terminal := range []bool{false, true} {
		b.Reset()
		v := newProgressView(&b, terminal, task.UPID())
		running := task
		running.Status, running.Result = "running", ""
		running.Progress = &client.Progress{Percent: 40, Phase: hostile, TotalBytes: 100, TransferredBytes: 40}
		v.show(running)
		v.show(client.Task{TaskID: task.TaskID, Type: hostile, Status: "running"})
		v.notice(hostile)
		v.finish(task)
		noTerminalControls(t, "task watch", b.String(), "\r", "\x1b[J", "\x1b[K", "\x1b[2K")
		if !strings.Contains(b.String(), escaped) {
			t.Errorf("terminal=%v: the task view does not show the text escaped:\n%q", terminal, b.String())
		}
	}

	op := client.Operation{ID: 1, Status: "running", Items: []client.OperationItem{
		{VMID: 100, Name: hostile, Node: "pve1", Target: ptr("pve2"), Action: "migrate", State: "running",
			Progress: &client.Progress{Percent: 50, Phase: hostile}},
		{VMID: 101, Name: "db", Node: "pve1", Action: "migrate", State: "failed", Error: &hostile},
	}}
	for _, terminal := range []bool{false, true} {
		b.Reset()
		v := NewOperationView(&b, terminal)
		v.Show(op)
		v.Show(op)
		v.Notice(hostile)
		noTerminalControls(t, "op watch", b.String(), "\x1b[1A\x1b[2K")
		if !strings.Contains(b.String(), escaped) {
			t.Errorf("terminal=%v: the operation view does not show the text escaped:\n%q", terminal, b.String())
		}
	}
	b.Reset()
	ItemsTable(op).Write(&b)
	PlanTable(client.Plan{Items: op.Items}).Write(&b)
	noTerminalControls(t, "op show", b.String())
}

// TestJSONStaysExact (docs/security.md item 35): -o json is the API's JSON: the control
// characters escaped the JSON way, so a program reads back the very name.
func TestJSONStaysExact(t *testing.T) {
	t.Parallel()
	name := osTitle + clear + osc8 + "\u202e"
	raw, _ := json.Marshal([]client.VMView{{VMID: 100, Name: name}})
	var b bytes.Buffer
	if err := WriteJSON(&b, json.RawMessage(raw)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "\x1b") || strings.Contains(b.String(), "\x07") {
		t.Fatalf("raw control characters in JSON:\n%q", b.String())
	}
	var back []client.VMView
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back[0].Name != name {
		t.Fatalf("JSON does not give the name back: %v %+v", err, back)
	}
}
