package main

import (
	"database/sql"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
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

// TestAdminAuditVerify (docs/security.md item 30): `vmgate admin audit verify` exits 0 on an
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

// TestAdminAuditVerifyKeyed (docs/security.md item 30): with the key file in place (as the
// server's first start leaves it), the admin commands key the chain at once and
// `vmgate admin audit verify` says from which row and since when. Rewriting a row
// and every row after it with the unkeyed rule, from the database alone, exits 1
// naming the row; so does stripping the keying record and rewriting the whole
// chain; and a keyed chain without the key file cannot be verified (exit 1,
// saying what to give).
func TestAdminAuditVerifyKeyed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "vmgate.key")
	if _, err := seal.LoadOrCreateKey(keyFile); err != nil {
		t.Fatal(err)
	}
	for _, email := range []string{"a@example.com", "b@example.com", "c@example.com", "d@example.com"} {
		if out, code := adminRun(t, dir, "velvet tundra orchestra 42\n", "user", "create", "--email", email, "--password-stdin"); code != 0 {
			t.Fatalf("user create %s: %d %s", email, code, out)
		}
	}
	out, code := adminRun(t, dir, "", "audit", "verify")
	if code != 0 || !strings.Contains(out, "audit chain intact: 5 rows (ids 1 to 5)") ||
		!regexp.MustCompile(`keyed from row 1 \(since \d{4}-\d\d-\d\dT`).MatchString(out) {
		t.Fatalf("verify the keyed chain: %d %s", code, out)
	}

	// rewrite is a writer of the database alone: row from and every row after it
	// changed or relinked, each value computed by the rule anyone can compute.
	rewrite := func(t *testing.T, dir string, from int64, strip bool) {
		t.Helper()
		st, err := store.Open(t.Context(), filepath.Join(dir, "vmgate.db"))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := st.AuditRange(t.Context(), 0, 100)
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", filepath.Join(dir, "vmgate.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		prev := ""
		for _, a := range rows {
			if a.ID >= from {
				if a.ID == from {
					a.Params = `{"role":"admin","via":"cli"}`
				}
				a.Prev = prev
				a.Chain = store.AuditChainValue(a)
				if _, err := db.Exec(`UPDATE audit SET params = ?, prev = ?, chain = ? WHERE id = ?`, a.Params, a.Prev, a.Chain, a.ID); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec(`UPDATE audit_chain SET head_id = ?, head_chain = ? WHERE id = 1`, a.ID, a.Chain); err != nil {
					t.Fatal(err)
				}
			}
			prev = a.Chain
		}
		if strip {
			if _, err := db.Exec(`UPDATE audit_chain SET keyed_from = 0, key_sealed = NULL WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name  string
		from  int64
		strip bool
		key   bool
		want  string
	}{
		{"a row rewritten with its successors", 3, false, true, "row 3 was changed"},
		{"the newest row rewritten", 5, false, true, "row 5 was changed"},
		{"the keying stripped and everything rewritten", 1, true, true, "row 1 began the keyed chain"},
		{"no key file", 6, false, false, "needs vmgate's key file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			copied := copyDir(t, dir)
			if c.key {
				b, err := os.ReadFile(keyFile)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(copied, "vmgate.key"), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rewrite(t, copied, c.from, c.strip)
			out, code := adminRun(t, copied, "", "audit", "verify")
			if code != 1 || !strings.Contains(out, c.want) {
				t.Errorf("verify: exit %d, %q; want exit 1 naming %q", code, out, c.want)
			}
		})
	}
}
