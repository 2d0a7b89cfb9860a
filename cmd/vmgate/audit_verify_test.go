package main

import (
	"database/sql"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// adminRun runs `vmgate admin --data-dir dir args...` and returns its output and
// exit code.
func adminRun(t *testing.T, dir string, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"admin", "--data-dir", dir}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("admin %v: %v", args, err)
	return "", -1
}

// copyDir copies the SQLite database of src (with its WAL, if any) into a new
// directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, name := range []string{"vmgate.db", "vmgate.db-wal"} {
		in, err := os.Open(filepath.Join(src, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

// TestAdminAuditVerify (SECURITY.md 30): `vmgate admin audit verify` exits 0 on an
// untouched database and prints the head; after a row is edited with SQL, a row
// deleted or a row inserted, it exits 1 naming the row.
func TestAdminAuditVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, email := range []string{"a@example.com", "b@example.com", "c@example.com", "d@example.com"} {
		if out, code := adminRun(t, dir, "velvet tundra orchestra 42\n", "user", "create", "--email", email, "--password-stdin"); code != 0 {
			t.Fatalf("user create %s: %d %s", email, code, out)
		}
	}
	if out, code := adminRun(t, dir, "", "user", "disable", "--email", "d@example.com"); code != 0 {
		t.Fatalf("user disable: %d %s", code, out)
	}
	out, code := adminRun(t, dir, "", "audit", "verify")
	if code != 0 || !strings.Contains(out, "audit chain intact: 5 rows (ids 1 to 5), checkpoint 0, head 5 ") {
		t.Fatalf("verify an untouched database: %d %s", code, out)
	}

	for _, c := range []struct {
		name, sql, want string
	}{
		{"edited", `UPDATE audit SET target = 'user:99' WHERE id = 2`, "row 2 was changed"},
		{"deleted", `DELETE FROM audit WHERE id = 3`, "row 3 was removed"},
		{"inserted", `INSERT INTO audit (id, at, action, result) VALUES (6, 0, 'user.create', 'ok')`, "row 6 was inserted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			copied := copyDir(t, dir)
			db, err := sql.Open("sqlite", filepath.Join(copied, "vmgate.db"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(c.sql); err != nil {
				t.Fatal(err)
			}
			db.Close()
			out, code := adminRun(t, copied, "", "audit", "verify")
			if code != 1 || !strings.Contains(out, c.want) {
				t.Errorf("verify: exit %d, %q; want exit 1 naming %q", code, out, c.want)
			}
		})
	}
}
