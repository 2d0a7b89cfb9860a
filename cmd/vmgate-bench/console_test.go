package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestConsoleMeasurement runs the console measurement alone at tiny sizes: it
// must measure every one of its goals (PASS or FAIL with a figure, never ERROR
// or not run), state vmgate's CPU per relayed MiB and leave no process behind.
// It asserts no speed (the machine is busy), but what holds on any machine: the
// idle consoles cost PVE nothing and fit the RSS budget, and the two paths read
// the same screen.
func TestConsoleMeasurement(t *testing.T) {
	if testing.Short() {
		t.Skip("builds vmgate and starts three processes")
	}
	args := []string{"-only", "console", "-rounds", "2", "-console-keys", "30", "-console-frames", "3", "-console-idle", "5",
		"-console-idle-wait", "200ms", "-no-fail"}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s\nstdout:\n%s", code, stderr.String(), stdout.String())
	}
	out := stdout.String()
	cfg, err := parseFlags(args, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	goals := consoleGoals(cfg)
	if len(goals) != 6 {
		t.Fatalf("%d console goals, want 6", len(goals))
	}
	for _, g := range goals {
		line := regexp.MustCompile(`(?m)^(PASS|FAIL)\s+` + regexp.QuoteMeta(g.id) + `\s.*\S\s+` + regexp.QuoteMeta(g.want) + `$`)
		if !line.MatchString(out) {
			t.Errorf("no measured line for goal %s in:\n%s", g.id, out)
		}
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^PASS\s+console\.idle\.pve\s.*\s0\s+0$`),
		regexp.MustCompile(`(?m)^PASS\s+console\.idle\.rss\s`),
		regexp.MustCompile(`(?m)^console\.frames\s+direct \d+ MiB/s, through vmgate \d+ MiB/s \(medians of 2 rounds\); 1024×768 at 32 bpp$`),
		regexp.MustCompile(`(?m)^console\.key\.p99\s+direct \d+ µs, ratio \d+\.\d\d \(medians of 2 rounds\)$`),
		regexp.MustCompile(`(?m)^\s+round 2, framebuffer, 3 updates \(9 MiB\): .* vmgate CPU \d+ µs/MiB$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("no line matching %s in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "measurement failed") || !strings.Contains(out, "stopped all ") {
		t.Errorf("the measurement failed or left processes:\n%s", out)
	}
	assertNoChildren(t)
}
