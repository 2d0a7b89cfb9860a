package main

import (
	"strings"
	"testing"
)

// TestUIBrowserRemoteMigrate moves VM 100 from dev to dev-b through "Move to
// another cluster" on `server --dev` (issue 22): the cluster is chosen, the
// pre-check fills each disk's storage and the NIC's bridge (ceph → tank,
// vmbr0 → vmbr1) and shows nothing blocking, the move goes to the task's live
// page, and dev-b's guest list, open in another tab, shows VM 100 without a
// reload.
func TestUIBrowserRemoteMigrate(t *testing.T) {
	t.Parallel()
	base := uiServer(t)
	b := newBrowser(t, base, 1280, 900)
	b.open("/vms")
	b.waitPath("/login")
	b.login("admin@vmgate.local", uiPassword)
	b.waitPath("/vms")

	// dev-b's list in a second tab for the whole test.
	list := b.newTab()
	list.open("/vms?cluster=2")
	list.waitLive()
	list.waitJS("VM 300 in dev-b's list", guestRowHas(300, "badge-running"))
	if eval[bool](list, guestRowHas(100, "badge-running")) {
		t.Fatal("dev-b's list has VM 100 before the move")
	}
	listOrigin := list.origin()

	b.open("/vms/1/pve1/100")
	b.click("button", "Move to another cluster")
	b.waitPath("/vms/1/pve1/100/remote-migrate")
	b.choose("Target cluster", "2")
	b.click("button", "Check")
	b.waitText("Move to dev-b, node pveb")
	if got := eval[string](b, `document.getElementById("storage.ceph").value`); got != "tank" {
		t.Errorf("the storage for ceph is pre-filled with %q, want tank", got)
	}
	if got := eval[string](b, `document.getElementById("bridge.vmbr0").value`); got != "vmbr1" {
		t.Errorf("the bridge for vmbr0 is pre-filled with %q, want vmbr1", got)
	}
	b.waitText("Nothing blocks the move.")
	if eval[bool](b, `[...document.querySelectorAll("button")].find(x => x.innerText === "Move to dev-b").disabled`) {
		t.Fatal("the move button is disabled with nothing blocking")
	}
	b.shot("remote-migrate-form")
	b.click("button", "Move to dev-b")
	b.waitPath("/tasks/UPID:pve1:")
	b.waitText("remote: started tunnel worker")
	b.waitJS("the move's end on the task page", `document.body.innerText.includes("migration finished successfully")`)
	b.shot("remote-migrate-task")
	// The target's tunnel task, beside the source's (on the page as it loads now).
	b.open(b.path())
	b.waitText("Target side")
	href := eval[string](b, `(([...document.querySelectorAll("a")].find(a => a.innerText.includes(":qmtunnel:100:"))) || {}).pathname || ""`)
	if !strings.HasPrefix(href, "/tasks/UPID:pveb") {
		t.Fatalf("the task page links no tunnel task on dev-b: %q", href)
	}
	b.open(href + "?cluster=2")
	b.waitPath("/tasks/UPID:pveb")
	b.waitText("received command 'resume'")
	b.shot("remote-migrate-tunnel-task")

	list.waitJS("VM 100 in dev-b's open list", guestRowHas(100, "badge-running"))
	if list.origin() != listOrigin {
		t.Error("dev-b's list was reloaded to show VM 100")
	}
	list.shot("dev-b-list")
	if !strings.Contains(eval[string](list, `document.body.innerText`), "dev-b") {
		t.Error("the list does not name dev-b")
	}
}
