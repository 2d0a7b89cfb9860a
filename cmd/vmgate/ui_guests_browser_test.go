package main

import (
	"strings"
	"testing"
)

// TestUIBrowserGuests walks the guests of issue 18 and the pages of issue 19 in the
// browser (docs/history.md): the guest list with both kinds; start CT 201 from its
// page; migrate CT 202 (running, its root disk on local-lvm) with a restart and
// watch the task page follow it live — the shutdown, the copy of its volume, the
// start on the target — to its new node; a bulk Start of the stopped VMs from the
// list, through its preview, to the operation's page; and the audit page at
// 1 280 px without a horizontal scroll.
func TestUIBrowserGuests(t *testing.T) {
	t.Parallel()
	base := uiServer(t)
	b := newBrowser(t, base, 1280, 900)
	b.open("/vms")
	b.waitPath("/login")
	b.login("admin@vmgate.local", uiPassword)
	b.waitPath("/vms")
	b.waitText("12 of 12 guests") // dev's 10 and dev-b's VM 300 and CT 310
	for _, link := range []string{"200", "201", "202", "203", "100"} {
		if !b.has("link", link) {
			t.Errorf("the guest list has no link %s", link)
		}
	}
	b.shot("guests")

	// Start CT 201.
	b.click("link", "201")
	b.waitPath("/cts/1/pve2/201")
	if b.has("button", "Suspend") {
		t.Error("a container offers Suspend")
	}
	b.click("button", "Start")
	b.waitPath("/cts/1/pve2/201?task=")
	b.waitJS("CT 201 started and shown running", `document.querySelector("#inline-task[data-result=ok]") &&
		document.getElementById("inline-task").innerText.includes("CT 201 started.") &&
		document.getElementById("vm-status").innerText.includes("running")`)
	b.shot("ct-started")

	// Migrate CT 202 with a restart, and watch it.
	b.open("/cts/1/pve3/202")
	b.click("button", "Migrate")
	b.waitPath("/cts/1/pve3/202/migrate")
	b.waitText("A running container cannot move while it runs")
	if !eval[bool](b, `document.getElementById("restart").checked`) {
		t.Error("the restart box of a running container is not ticked")
	}
	b.choose("Target node", "pve1")
	b.shot("ct-migrate")
	b.click("button", "Start migration")
	b.waitPath("/tasks/UPID:pve3:")
	// The log the page shows grows live through the restart migration's steps, in
	// order, without a reload.
	loaded := eval[float64](b, "performance.timeOrigin")
	steps := []string{"shutdown CT 202", "found local volume 'local-lvm:vm-202-disk-0'", "start container on target node"}
	for _, s := range steps {
		b.wait("the log line "+s, func() bool {
			return strings.Contains(eval[string](b, `document.getElementById("task-log").textContent`), s)
		})
	}
	log := eval[string](b, `document.getElementById("task-log").textContent`)
	for i := 1; i < len(steps); i++ {
		if strings.Index(log, steps[i-1]) > strings.Index(log, steps[i]) {
			t.Errorf("%q came after %q:\n%s", steps[i-1], steps[i], log)
		}
	}
	b.waitText("CT 202 is now on pve1")
	if eval[float64](b, "performance.timeOrigin") != loaded {
		t.Error("the task page was reloaded")
	}
	b.shot("ct-migrated")
	b.click("link", "pve1")
	b.waitPath("/cts/1/pve1/202")

	// Bulk: start every stopped VM, through the preview.
	b.open("/vms?type=qemu&status=stopped")
	b.waitText("guests")
	b.click("checkbox", "all "+strings.TrimSpace(strings.Split(eval[string](b, `document.getElementById("vm-count").innerText`), " of ")[0])+" matching the filter")
	b.click("button", "Start")
	b.waitPath("/vms/bulk?")
	b.waitText("A preview: nothing has happened yet.")
	b.shot("bulk-preview")
	confirm := eval[string](b, `[...document.querySelectorAll("form[action='/vms/bulk'] button")].map(b => b.innerText).join("")`)
	if !strings.HasPrefix(confirm, "Start ") {
		t.Fatalf("the preview's button: %q", confirm)
	}
	b.click("button", confirm)
	b.waitPath("/operations/")
	b.waitText("has started.")
	b.shot("bulk-operation")

	// The audit page at 1 280 px: no horizontal scroll.
	b.open("/admin/audit")
	b.waitText("Audit log")
	b.shot("audit-1280")
	if w, vw := eval[int](b, `document.querySelector("table.audit").scrollWidth`), eval[int](b, "document.documentElement.clientWidth"); w > vw {
		t.Errorf("the audit table is %d px wide in a %d px viewport", w, vw)
	}
	if w, vw := eval[int](b, "document.documentElement.scrollWidth"), eval[int](b, "document.documentElement.clientWidth"); w > vw {
		t.Errorf("the audit page is %d px wide in a %d px viewport", w, vw)
	}
}
