package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vmgate/vmgate/client"
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
	for flag, want := range map[string]Format{"": JSON, "auto": JSON, "json": JSON, "table": Table, "wide": Wide} {
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
	names := ClusterNames{1: "lab"}
	cases := []struct {
		name   string
		tab    TableOf
		header string
		row    string
	}{
		{"clusters", ClustersTable([]client.ClusterView{{ID: 1, Name: "lab", Role: "operator", Status: "online", PVEVersion: ptr("8.4.1")}}),
			"ID NAME ROLE STATUS PVE", "1 lab operator online 8.4.1"},
		{"vms", VMsTable([]client.VMView{{VMID: 100, Name: "web1", Node: "pve1", Status: "running", Tags: []string{"a", "b"}, MaxCPU: 2, MaxMem: 4 << 30}}),
			"VMID NAME NODE STATUS LOCK HA CPUS MEM TAGS", "100 web1 pve1 running - - 2 4.0GiB a,b"},
		{"guests", GuestsTable([]client.Guest{{VMView: client.VMView{VMID: 200, Name: "ct1", Node: "pve1", Status: "running", MaxCPU: 1,
			MaxMem: 512 << 20}, Type: client.LXC, ClusterID: 1}}, names, true),
			"CLUSTER VMID TYPE NAME NODE STATUS LOCK HA CPUS MEM TAGS", "lab 200 ct ct1 pve1 running - - 1 512.0MiB -"},
		{"nodes", NodesTable([]client.Node{{Node: "pve1", Status: "online", CPU: 0.25, MaxCPU: 16, Mem: 1 << 30, MaxMem: 4 << 30, Uptime: 3600}}),
			"NODE STATUS CPU MEM UPTIME MAINTENANCE", "pve1 online 25%/16 1.0GiB/4.0GiB 1h00m -"},
		{"users", UsersTable([]client.User{{ID: 2, Email: "op@example.com", Nickname: "Op", Role: "user"}}),
			"ID EMAIL ROLE DISABLED CREATED NICKNAME", "2 op@example.com user false - Op"},
		{"tokens", TokensTable([]client.APIToken{{ID: "abc", Name: "ci", ExpiresAt: now.Add(time.Hour), LastUsedAt: &used, LastUsedFrom: &from,
			Grants: &[]client.Grant{{ClusterID: 1, Role: "viewer"}}}}, now, names),
			"ID NAME EXPIRES LAST-USED FROM GRANTS", "abc ci " + Stamp(now.Add(time.Hour)) + " 3m00s-ago 192.0.2.7 lab:viewer"},
		{"audit", AuditTable([]client.AuditRecord{{ID: 9, At: now, UserEmail: "op@example.com", SessionID: "token:abc", Action: "vm.start",
			ClusterID: 1, VMID: 101, Result: "ok", Count: 1}}, names),
			"ID AT ACTOR ACTION TARGET RESULT ADDRESS REASON", "9 " + ShortStamp(now) + " op@example.com vm.start lab/101 ok - -"},
		{"tasks", TasksTable([]client.Task{{TaskID: ptr("UPID:pve1:0000B2C4:0001A3F1:6740A0B0:qmigrate:100:vmgate@pve!gw:"), TaskRef: ptr[int64](18),
			ClusterID: 1, Node: "pve1", Type: "qmigrate", GuestKind: ptr(client.QEMU), Op: ptr("migrate"), IsMigration: true, VMID: ptr[int64](100),
			StartedBy: ptr("ops@example.com"), Status: "stopped", Result: "ok", StartTime: now, Target: ptr("pve2")}}, names),
			"STARTED CLUSTER OP KIND VMID NODE TARGET RESULT BY REF", ShortStamp(now) + " lab migrate vm 100 pve1 pve2 ok ops@example.com 18"},
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

// TestTablesFitAHundredColumns (issue 19 item 7): long values are cut short with
// "…" in the columns that may be, the widest first, so the table fits 100
// columns; -o wide shows every column and every value whole.
func TestTablesFitAHundredColumns(t *testing.T) {
	long := strings.Repeat("n", 80)
	tab := TableOf{Header: []string{"ID", "NAME", "STATUS", "REASON", "UPID"}, Flex: []string{"NAME", "REASON"}, WideOnly: []string{"UPID"}}
	tab.Add("1", long, "running", "a reason that goes on and on "+long, "UPID:pve1:0000B2C4:0001A3F1:6740A0B0:qmigrate:100:vmgate@pve!gw:")
	tab.Add("2", "short", "stopped", "", "")
	var b bytes.Buffer
	tab.Write(&b)
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > TableWidth {
			t.Errorf("a line of %d columns:\n%s", n, l)
		}
	}
	if strings.Contains(b.String(), "UPID") || !strings.Contains(b.String(), "…") || !strings.Contains(b.String(), "short") {
		t.Errorf("narrow table:\n%s", b.String())
	}
	b.Reset()
	tab.Wide = true
	tab.Write(&b)
	if !strings.Contains(b.String(), long) || !strings.Contains(b.String(), "UPID:pve1:") || strings.Contains(b.String(), "…") {
		t.Errorf("wide table:\n%s", b.String())
	}
}
