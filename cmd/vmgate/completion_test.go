package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestCompletionScripts: `vmgate completion bash|zsh|fish` prints a script the
// shell parses (bash -n, zsh -n, fish -n where the shell is installed) that names
// every command of the model; bash's completes commands, flags and enum values.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	var commands []string
	for _, leaf := range testModel(t).Leaves(true) {
		commands = append(commands, strings.Fields(commandPath(leaf))...)
	}
	dir := t.TempDir()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := runCLI(t, nil, "", "completion", shell).want(t, 0, "completion "+shell)
		for _, c := range commands {
			if !regexp.MustCompile(`(^|[\s"'])` + regexp.QuoteMeta(c) + `([\s"']|$)`).MatchString(r.stdout) {
				t.Errorf("%s: the script does not name %q", shell, c)
			}
		}
		file := filepath.Join(dir, "vmgate."+shell)
		if err := os.WriteFile(file, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("%s is not installed: its script is not parsed", shell)
			continue
		}
		if out, err := exec.Command(shell, "-n", file).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
	}
	runCLI(t, nil, "", "completion", "powershell").want(t, 2, "an unknown shell")

	if _, err := exec.LookPath("fish"); err == nil {
		out, err := exec.Command("fish", "-c", `source $argv[1]; complete -C "vmgate vm mi"; complete -C "vmgate vm list -o "`,
			filepath.Join(dir, "vmgate.fish")).CombinedOutput()
		if got := strings.Fields(string(out)); err != nil || strings.Join(got, " ") != "migrate auto json table wide" {
			t.Errorf("fish completes %q (%v)", got, err)
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return
	}
	complete := func(line string) []string {
		t.Helper()
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		script := `source "$1"; COMP_WORDS=(` + quoteAll(words) + `); COMP_CWORD=` + strconv.Itoa(len(words)-1) +
			`; _vmgate; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command("bash", "-c", script, "bash", filepath.Join(dir, "vmgate.bash")).CombinedOutput()
		if err != nil {
			t.Fatalf("complete %q: %v\n%s", line, err, out)
		}
		return strings.Fields(string(out))
	}
	for line, want := range map[string][]string{
		"vmgate vm mi":                     {"migrate"},
		"vmgate task ":                     {"list", "log", "show", "watch"},
		"vmgate vm migrate --with":         {"--with-local-disks"},
		"vmgate vm list -o ":               {"auto", "json", "table"},
		"vmgate vm list --server x --stat": {"--status"},
		"vmgate completion ":               {"bash", "fish", "zsh"},
		"vmgate token create --t":          {"--token"},
	} {
		got := complete(line)
		for _, w := range want {
			if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
				t.Errorf("complete %q: %v, want %v among them", line, got, want)
			}
		}
	}
}

func quoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
