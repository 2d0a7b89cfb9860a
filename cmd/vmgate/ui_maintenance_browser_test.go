package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// TestUIBrowserMaintenance walks node maintenance and the rolling maintenance
// wizard in Chromium: pve3's page previews entering maintenance and enters it
// (the operation's page follows it to its end), shows the node in maintenance
// and leaves it; then the fleet page's Rolling maintenance: the plan per node,
// the start, the live page with each node's step, Pause while pve2 is held in
// its boot, Resume once it may boot, and the end with every node done.
func TestUIBrowserMaintenance(t *testing.T) {
	t.Parallel()
	const pw = "maintenance through the browser"
	sim, info := serveSim(t, pvesim.Options{Speed: 100, Ceph: true})
	_, _, c, cid := startLabOn(t, pw, info)
	b := newBrowser(t, c.BaseURL(), 1280, 900)
	b.open("/vms")
	b.waitPath("/login")
	b.login("ops@example.com", pw)
	b.waitPath("/vms")

	node := fmt.Sprintf("/nodes/%d/pve3", cid)
	b.open(node)
	b.click("button", "Preview entering maintenance")
	b.waitText("The plan of entering maintenance")
	b.shot("maintenance-preview")
	b.click("button", "Enter maintenance")
	b.waitPath("/operations/")
	b.waitJS("the enter's end", `document.querySelector("#op-status .badge").innerText.startsWith("done")`)
	b.shot("maintenance-entered")
	b.open(node)
	b.waitText("pve3 is in maintenance since")
	if !b.has("button", "Leave maintenance") {
		t.Fatal("a node in maintenance offers no Leave maintenance")
	}
	b.click("button", "Leave maintenance")
	b.waitPath("/operations/")
	b.waitJS("the leave's end", `document.querySelector("#op-status .badge").innerText.startsWith("done")`)
	if st, _ := sim.VM(104); st.Node != "pve3" {
		t.Errorf("VM 104 is on %s after leaving", st.Node)
	}

	if err := sim.SetBootFailure("pve2", true); err != nil {
		t.Fatal(err)
	}
	b.open("/")
	b.click("link", "Rolling maintenance")
	b.waitPath(fmt.Sprintf("/clusters/%d/rolling", cid))
	b.choose("Reboot", "always")
	b.click("button", "Preview the plan")
	b.waitText("pve3: reboots")
	for _, n := range []string{"pve1: reboots", "pve2: reboots"} {
		if !strings.Contains(b.text(), n) {
			t.Errorf("the plan lacks %q", n)
		}
	}
	b.shot("rolling-plan")
	b.click("button", "Start rolling maintenance")
	b.waitPath("/operations/")
	b.waitJS("pve2 away after its reboot", `document.querySelector("#roll-node-pve2 .roll-step").innerText === "wait"`)
	b.click("button", "Pause")
	b.waitPath("/operations/")
	b.waitJS("the pause shown", `!document.getElementById("roll-paused").hidden`)
	b.shot("rolling-paused")
	if err := sim.SetBootFailure("pve2", false); err != nil {
		t.Fatal(err)
	}
	b.click("button", "Resume")
	b.waitPath("/operations/")
	b.waitJS("the rolling maintenance's end", `document.querySelector("#op-status .badge").innerText === "done"`)
	b.waitText("every node done")
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		if step := eval[string](b, `document.querySelector("#roll-node-`+n+` .roll-step").innerText`); step != "done" {
			t.Errorf("%s's step: %q", n, step)
		}
		if info, _ := sim.Node(n); info.Boots != 1 {
			t.Errorf("%s booted %d times", n, info.Boots)
		}
	}
	b.shot("rolling-done")
}
