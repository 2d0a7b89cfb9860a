package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// columns splits a table's lines into fields, so that checks do not depend on
// the padding.
func columns(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestTablesLineUpAndMarkEmptyCells(t *testing.T) {
	tab := TableOf{Header: []string{"VMID", "NAME", "LOCK"}}
	tab.Add("100", "web1", "")
	tab.Add("101", "a\tname\nwith breaks", "migrate")
	var b bytes.Buffer
	if err := tab.Write(&b); err != nil {
		t.Fatal(err)
	}
	rows := columns(t, b.String())
	if len(rows) != 3 || strings.Join(rows[0], " ") != "VMID NAME LOCK" || strings.Join(rows[1], " ") != "100 web1 -" {
		t.Fatalf("table:\n%s", b.String())
	}
	lines := strings.Split(b.String(), "\n")
	if strings.Index(lines[0], "NAME") != strings.Index(lines[1], "web1") {
		t.Fatalf("columns are not aligned:\n%s", b.String())
	}
	if strings.Count(b.String(), "\n") != 3 {
		t.Fatalf("a cell broke a line:\n%q", b.String())
	}
}

func TestChooseFormat(t *testing.T) {
	// A file that is no terminal: JSON by default.
	f, err := openNotATerminal(t)
	if err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]Format{"": JSON, "auto": JSON, "json": JSON, "table": Table} {
		if got, err := ChooseFormat(flag, f); err != nil || got != want {
			t.Errorf("-o %q: %v %v, want %v", flag, got, err, want)
		}
	}
	if _, err := ChooseFormat("yaml", f); Explain(err, "").Code != ExitUsage {
		t.Errorf("-o yaml: %v", err)
	}
}

func TestTablesOfTheReads(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	used := now.Add(-3 * time.Minute)
	from := "192.0.2.7"
	cases := []struct {
		name   string
		tab    TableOf
		header string
		row    string
	}{
		{"clusters", ClustersTable([]ClusterView{{ID: 1, Name: "lab", Role: "operator", Status: "online", PVEVersion: "8.4.1"}}),
			"ID NAME ROLE STATUS PVE", "1 lab operator online 8.4.1"},
		{"vms", VMsTable([]VM{{VMID: 100, Name: "web1", Node: "pve1", Status: "running", Tags: []string{"a", "b"}, MaxCPU: 2, MaxMem: 4 << 30}}),
			"VMID NAME NODE STATUS LOCK HA CPUS MEM TAGS", "100 web1 pve1 running - - 2 4.0GiB a,b"},
		{"nodes", NodesTable([]Node{{Node: "pve1", Status: "online", CPU: 0.25, MaxCPU: 16, Mem: 1 << 30, MaxMem: 4 << 30, Uptime: 3600}}),
			"NODE STATUS CPU MEM UPTIME", "pve1 online 25%/16 1.0GiB/4.0GiB 1h00m"},
		{"users", UsersTable([]User{{ID: 2, Email: "op@example.com", Nickname: "Op", Role: "user"}}),
			"ID EMAIL ROLE DISABLED CREATED NICKNAME", "2 op@example.com user false - Op"},
		{"tokens", TokensTable([]APIToken{{ID: "abc", Name: "ci", ExpiresAt: now.Add(time.Hour), LastUsedAt: &used, LastUsedFrom: &from,
			Grants: &[]Grant{{ClusterID: 1, Role: "viewer"}}}}, now),
			"ID NAME EXPIRES LAST-USED FROM GRANTS", "abc ci " + Stamp(now.Add(time.Hour)) + " 3m00s-ago 192.0.2.7 1:viewer"},
		{"audit", AuditTable([]AuditRecord{{ID: 9, At: now, UserEmail: "op@example.com", SessionID: "token:abc", Action: "vm.start",
			ClusterID: 1, VMID: 101, Result: "ok", Count: 1}}),
			"ID AT ACTOR VIA ACTION TARGET RESULT ADDRESS REASON", "9 " + Stamp(now) + " op@example.com token:abc vm.start vm:1/101 ok - -"},
	}
	for _, c := range cases {
		var b bytes.Buffer
		c.tab.Write(&b)
		rows := columns(t, b.String())
		if strings.Join(rows[0], " ") != c.header || len(rows) != 2 || strings.Join(rows[1], " ") != c.row {
			t.Errorf("%s:\n%s\nwant header %q and row %q", c.name, b.String(), c.header, c.row)
		}
	}
}
