package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/store"
)

// TestAdminUserRules: `vmgate admin user create` and `disable` go through the
// rules the API goes through (issue 18, docs/history.md; internal/accounts): a
// malformed e-mail, a display name, a control character in the nickname and a
// password the policy refuses (docs/security.md item 13) are refused; the last
// enabled admin cannot be disabled (last_admin: somebody must still manage
// vmgate), and once another admin exists it can; each change is audited with
// via "cli". That disable ends the user's sessions on a running server is
// TestDisableFromAnotherProcess.
func TestAdminUserRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const pw = "velvet tundra orchestra 42\n"
	if out, code := adminRun(t, dir, pw, "user", "create", "--email", "Root@Example.com", "--role", "admin", "--password-stdin"); code != 0 {
		t.Fatalf("create the first admin: %d %s", code, out)
	}
	for _, c := range []struct {
		name, stdin, want string
		args              []string
	}{
		{"malformed e-mail", pw, "plain e-mail address", []string{"--email", "not-an-address"}},
		{"display name", pw, "plain e-mail address", []string{"--email", "Bob <bob@example.com>"}},
		{"nickname", pw, "printable", []string{"--email", "bob@example.com", "--nickname", "bob\x07"}},
		{"weak password", "bob123456789\n", "password", []string{"--email", "bob@example.com"}},
		{"taken e-mail", pw, "", []string{"--email", " root@example.com"}},
	} {
		args := append([]string{"user", "create", "--password-stdin"}, c.args...)
		if out, code := adminRun(t, dir, c.stdin, args...); code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d %q, want 1 saying %q", c.name, code, out, c.want)
		}
	}

	out, code := adminRun(t, dir, "", "user", "disable", "--email", "root@example.com")
	if code != 1 || !strings.Contains(out, "last enabled admin") || !strings.Contains(out, "create another admin first") {
		t.Fatalf("disable the last admin: exit %d %q, want 1 with a hint", code, out)
	}
	if out, code := adminRun(t, dir, pw, "user", "create", "--email", "second@example.com", "--role", "admin", "--password-stdin"); code != 0 {
		t.Fatalf("create a second admin: %d %s", code, out)
	}
	if out, code := adminRun(t, dir, "", "user", "disable", "--email", "ROOT@example.com"); code != 0 ||
		!strings.Contains(out, "disabled user 1 root@example.com; ended 0 session(s)") {
		t.Fatalf("disable one of two admins: %d %s", code, out)
	}
	if out, code := adminRun(t, dir, "", "user", "disable", "--email", "second@example.com"); code != 1 ||
		!strings.Contains(out, "last enabled admin") {
		t.Fatalf("disable the admin left: exit %d %q, want 1", code, out)
	}
	list, code := adminRun(t, dir, "", "user", "list")
	if code != 0 || !regexp.MustCompile(`root@example.com\s+-\s+admin\s+true`).MatchString(list) ||
		!regexp.MustCompile(`second@example.com\s+-\s+admin\s+false`).MatchString(list) || strings.Contains(list, "bob") {
		t.Fatalf("user list: %d\n%s", code, list)
	}

	st, err := store.Open(t.Context(), filepath.Join(dir, "vmgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.AuditRange(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Action+" "+r.Target+" "+r.Result+" "+r.Params)
	}
	want := []string{
		`user.create user:root@example.com ok {"nickname":"","role":"admin","via":"cli"}`,
		`user.create user:not-an-address invalid_request {"nickname":"","role":"user","via":"cli"}`,
		`user.create user:bob <bob@example.com> invalid_request {"nickname":"","role":"user","via":"cli"}`,
		`user.create user:bob@example.com invalid_request {"nickname":"bob\u0007","role":"user","via":"cli"}`,
		`user.create user:bob@example.com invalid_request {"nickname":"","role":"user","via":"cli"}`,
		`user.create user:root@example.com conflict {"nickname":"","role":"user","via":"cli"}`,
		`user.create user:second@example.com ok {"nickname":"","role":"admin","via":"cli"}`,
		`user.disable user:1 ok {"via":"cli"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit trail:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
