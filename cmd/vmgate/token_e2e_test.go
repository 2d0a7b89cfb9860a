package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestScriptWithAPIToken (docs/security.md item 32): a script with only an API token
// ($VMGATE_TOKEN, no login saved) starts, stops and migrates a VM and follows the
// task; revoking the token, disabling its owner, or removing the owner's grant
// makes its next call fail at once (exit 3, 3, 4); the secret is in no log and
// no table.
func TestScriptWithAPIToken(t *testing.T) {
	t.Parallel()
	const pw = "scripts use tokens now"
	_, srv, c, _ := startLab(t, pw, "--speed", "8", "--auth-delay", "0s")
	base := c.BaseURL()
	admin := cliEnv(t)
	runCLI(t, admin, pw+"\n", "login", "--server", base, "--email", "ops@example.com").want(t, 0, "admin login")
	runCLI(t, admin, "ember harbor violin 31\n", "user", "add", "op@example.com", "--password-stdin").want(t, 0, "user add")
	runCLI(t, admin, "", "grant", "op@example.com", "lab", "operator").want(t, 0, "grant")
	op := cliEnv(t)
	runCLI(t, op, "ember harbor violin 31\n", "login", "--server", base, "--email", "op@example.com").want(t, 0, "op login")

	newToken := func(name string) (secret, id string) {
		t.Helper()
		r := runCLI(t, op, "", "token", "create", name, "--grant", "lab:operator", "--expires-in-days", "7", "-o", "table").
			want(t, 0, "token create")
		secret = strings.TrimSpace(r.stdout)
		if !regexp.MustCompile(`^vmg_[0-9A-Za-z]{49}$`).MatchString(secret) || !strings.Contains(r.stderr, "shown this once") {
			t.Fatalf("token create printed:\n%s\n%s", r.stdout, r.stderr)
		}
		id = regexp.MustCompile(`API token (\S+) `).FindStringSubmatch(r.stderr)[1]
		return secret, id
	}
	secret, id := newToken("nightly")
	// The script: its server and its token, nothing saved.
	script := []string{"VMGATE_CONFIG=" + filepath.Join(t.TempDir(), "none.json"), "VMGATE_SERVER=" + base, "VMGATE_TOKEN=" + secret}

	runCLI(t, script, "", "vm", "start", "1", "pve1", "101").want(t, 0, "start")
	runCLI(t, script, "", "vm", "stop", "1", "pve1", "101").want(t, 0, "stop")
	r := runCLI(t, script, "", "vm", "migrate", "1", "pve1", "100", "--target", "pve2", "--no-watch").want(t, 0, "migrate")
	upid := strings.TrimSpace(r.stdout)
	r = runCLI(t, script, "", "task", "watch", upid).want(t, 0, "follow the task")
	if !migrated.MatchString(lastLine(r.stdout)) {
		t.Fatalf("the followed migration: %q", r.stdout)
	}
	runCLI(t, script, "", "token", "create", "more").want(t, 1, "a token making tokens")
	runCLI(t, script, "", "logout").want(t, 2, "logout with a token")
	if _, err := os.Stat(filepath.Join(filepath.Dir(script[0][len("VMGATE_CONFIG="):]), "none.json")); err == nil {
		t.Fatal("the script's run saved a login")
	}

	// Every action is the owner's, through the token.
	var recs []struct {
		UserEmail string `json:"userEmail"`
		SessionID string `json:"sessionId"`
	}
	r = runCLI(t, admin, "", "audit", "--action", "vm.migrate", "-o", "json").want(t, 0, "audit")
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 1 || recs[0].UserEmail != "op@example.com" ||
		recs[0].SessionID != "token:"+id {
		t.Fatalf("the migration's audit record: %+v %v", recs, err)
	}

	// Revoked: 3 at once.
	runCLI(t, op, "", "token", "rm", id).want(t, 0, "token rm")
	r = runCLI(t, script, "", "vm", "status", "1", "pve2", "100").want(t, 3, "a revoked token")
	if !strings.Contains(r.stderr, "API token was refused") {
		t.Fatalf("a revoked token's message:\n%s", r.stderr)
	}

	// The owner disabled: 3; enabled again: it works; the owner's grant removed: 4.
	secret2, _ := newToken("weekly")
	script2 := append(script[:2:2], "VMGATE_TOKEN="+secret2)
	runCLI(t, script2, "", "vm", "status", "1", "pve2", "100").want(t, 0, "the second token")
	runCLI(t, admin, "", "user", "disable", "op@example.com").want(t, 0, "disable the owner")
	runCLI(t, script2, "", "vm", "status", "1", "pve2", "100").want(t, 3, "the owner disabled")
	runCLI(t, admin, "", "user", "enable", "op@example.com").want(t, 0, "enable the owner")
	runCLI(t, script2, "", "vm", "status", "1", "pve2", "100").want(t, 0, "the owner enabled")
	runCLI(t, admin, "", "revoke", "op@example.com", "lab").want(t, 0, "revoke the owner's grant")
	runCLI(t, script2, "", "vm", "status", "1", "pve2", "100").want(t, 4, "the owner's grant removed")

	// The secrets are in no table and no log. (Disabling op ended op's session.)
	runCLI(t, op, "ember harbor violin 31\n", "login", "--server", base, "--email", "op@example.com").want(t, 0, "op again")
	tables := runCLI(t, op, "", "token", "list", "-o", "table").want(t, 0, "token list").stdout +
		runCLI(t, admin, "", "token", "list", "--user", "op@example.com", "-o", "table").want(t, 0, "an admin's token list").stdout +
		runCLI(t, admin, "", "audit", "--limit", "500", "-o", "table").want(t, 0, "audit table").stdout
	for _, s := range []string{secret, secret2} {
		if strings.Contains(tables, s[4:]) || strings.Contains(srv.log(), s[4:]) {
			t.Fatalf("a token's secret is shown or logged")
		}
	}
	if !strings.Contains(tables, "weekly") {
		t.Fatalf("the tables:\n%s", tables)
	}
}
