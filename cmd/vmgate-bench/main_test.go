package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/testkit"
)

// TestMain lets the test binary act as the bare proxy or the constant server when
// the bench re-executes it, as the bench binary does.
func TestMain(m *testing.M) {
	if code, ok := childRole(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestSmoke runs the whole bench with a tiny budget so that it cannot rot: it must
// complete, print a verdict line for every goal, write the Markdown report and leave
// no process behind. It asserts no figure: CI runs on a busy machine, and speed is
// what the bench itself reports.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds vmgate and starts five processes")
	}
	md := filepath.Join(t.TempDir(), "report.md")
	args := []string{"-rounds", "1", "-duration", "200ms", "-clients", "2", "-conn-clients", "1,2",
		"-vms", "300", "-listers", "4", "-live-streams", "20", "-live-duration", "2s", "-login-clients", "2", "-flood-addresses", "3", "-mixed-rate", "50",
		"-max-clients", "2", "-replica-trials", "8",
		"-console-keys", "5", "-console-frames", "2", "-console-idle", "3", "-console-idle-wait", "100ms", "-no-fail", "-markdown", md}
	postgres := os.Getenv("VMGATE_TEST_POSTGRES")
	if postgres != "" {
		args = append(args, "-postgres", postgres)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s\nstdout:\n%s", code, stderr.String(), stdout.String())
	}
	out := stdout.String()
	cfg, err := parseFlags(args, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range goalList(cfg) {
		states := "PASS|FAIL"
		if g.id == "replica.change" && postgres == "" {
			states = "SKIP"
		}
		line := regexp.MustCompile(`(?m)^(` + states + `)\s+` + regexp.QuoteMeta(g.id) + `\s`)
		if !line.MatchString(out) {
			t.Errorf("no %s line for goal %s in:\n%s", states, g.id, out)
		}
	}
	// Each floor says met or missed, and a missed one why (issue 19 item 10).
	for _, id := range []string{"floor.cpu", "floor.throughput", "floor.p50", "floor.p99"} {
		line := regexp.MustCompile(`(?m)^(met|missed)\s+` + regexp.QuoteMeta(id) + `\s.*\n(\s+why: .+\n)?`)
		m := line.FindString(out)
		if m == "" {
			t.Errorf("no met/missed line for floor %s in:\n%s", id, out)
		} else if strings.HasPrefix(m, "missed") && !strings.Contains(m, "why: ") {
			t.Errorf("floor %s is missed without a reason: %q", id, m)
		}
	}
	if !strings.Contains(out, "stopped all ") {
		t.Errorf("the bench does not say it stopped its processes:\n%s", out)
	}
	assertNoChildren(t)
	report, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(report, []byte("== verdict")) || !bytes.Contains(report, []byte("```text")) {
		t.Errorf("the Markdown report lacks the verdict:\n%s", report)
	}
}

// assertNoChildren fails if this process still has a child (pgrep -P exits 1 when
// none matches). The processes may take a moment to be reaped; poll briefly.
func assertNoChildren(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("pgrep"); err != nil {
		t.Log("pgrep not found: the bench's own /proc check stands alone")
		return
	}
	testkit.Eventually(t, "no process left behind", func() error {
		out, err := exec.Command("pgrep", "-P", strconv.Itoa(os.Getpid())).Output()
		// pgrep's own process is a child of this one too; it does not list itself.
		if err != nil && len(bytes.TrimSpace(out)) == 0 {
			return nil
		}
		return fmt.Errorf("processes left behind: %s", out)
	})
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"-only", "status,login"}, true},
		{[]string{"-only", "status,nonsense"}, false},
		{[]string{"-conn-clients", "1,x"}, false},
		{[]string{"-rounds", "0"}, false},
		{[]string{"-flood-addresses", "300"}, false},
		{[]string{"extra"}, false},
		{[]string{"-console-idle", "0"}, false},
		{[]string{"-console-frames", "0"}, false},
	} {
		var stderr bytes.Buffer
		c, err := parseFlags(tc.args, &stderr)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok=%v", tc.args, err, tc.ok)
		}
		if err == nil && len(c.only) > 0 && (!c.selected("status") || c.selected("list")) {
			t.Errorf("%q: selection %v", tc.args, c.only)
		}
	}
}

func TestPercentileAndMedian(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {99, 10}, {100, 10}, {10, 1}, {0, 1}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of nothing")
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
}

func TestProcReaders(t *testing.T) {
	pid := os.Getpid()
	if _, err := cpuTime(pid); err != nil {
		t.Error(err)
	}
	if kib, err := memKiB(pid, "VmRSS"); err != nil || kib <= 0 {
		t.Errorf("VmRSS %d, %v", kib, err)
	}
	if _, err := memKiB(pid, "NoSuchField"); err == nil {
		t.Error("a missing field read without error")
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"-rounds":                 "-rounds",
		"status,login":            "status,login",
		"":                        "''",
		"a b":                     "'a b'",
		"postgres://h/db?x=1&y=2": "'postgres://h/db?x=1&y=2'",
		"it's":                    `'it'\''s'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
