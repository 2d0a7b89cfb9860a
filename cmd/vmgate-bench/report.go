package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// printMachine says where and when the figures were taken: they mean little without.
func (b *bench) printMachine() {
	b.printf("%s\n", b.command())
	b.printf("date:    %s\n", b.began.Format(time.RFC3339))
	b.printf("machine: %s, %d cores, GOMAXPROCS %d, %s, Linux %s\n", cpuModel(), runtime.NumCPU(),
		runtime.GOMAXPROCS(0), runtime.Version(), readTrim("/proc/sys/kernel/osrelease"))
	b.printf("load:    %s (1, 5, 15 min; other work on the machine skews every figure)\n", loadAvg())
	if rev := gitRevision(); rev != "" {
		b.printf("commit:  %s\n", rev)
	}
	b.printf("budget:  %d rounds × %v per load\n", b.cfg.rounds, b.cfg.duration)
}

func cpuModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func loadAvg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// gitRevision is the commit the bench was run on, "+dirty" with local changes.
func gitRevision() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		rev += "+dirty"
	}
	return rev
}

// command is the command line as one would type it again.
func (b *bench) command() string {
	words := []string{"go", "run", "./cmd/vmgate-bench"}
	for _, a := range b.args {
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ")
}

// shellQuote single-quotes a word that a shell would otherwise split or expand.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,=@%+-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printVerdict prints one line per goal: state, goal, the figure against the goal,
// and the raw figures behind it.
func (b *bench) printVerdict() {
	b.printf("\n== verdict (median of %d rounds; load now %s)\n", b.cfg.rounds, loadAvg())
	tw := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', 0)
	pass, fail := 0, 0
	for _, g := range b.goals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.state, g.id, g.what, g.value, g.want)
		switch g.state {
		case statePass:
			pass++
		case stateFail, stateError:
			fail++
		}
	}
	tw.Flush()
	b.printf("\n")
	for _, g := range b.goals {
		if g.detail != "" {
			b.printf("%-18s %s\n", g.id, g.detail)
		}
	}
	b.printFloors()
	b.printf("\n%d goals met, %d missed, %d not measured\n", pass, fail, len(b.goals)-pass-fail)
}

// writeMarkdown appends the run's output to -markdown FILE as one fenced block.
func (b *bench) writeMarkdown() error {
	if b.cfg.markdown == "" {
		return nil
	}
	f, err := os.OpenFile(b.cfg.markdown, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n### Run of %s\n\n```text\n%s```\n", b.began.Format("2006-01-02 15:04 MST"), b.text.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
