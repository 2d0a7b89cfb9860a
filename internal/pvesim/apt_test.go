package pvesim

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestAptPackages: apt/update lists the pending updates (a newer kernel
// among them, new packages without OldVersion), POST apt/update is an
// aptupdate task with apt-get's lines (none with quiet), apt/versions puts
// proxmox-ve (RunningKernel) and pve-manager (ManagerVersion) first, then
// the installed kernels newest first; installing the updates leaves a
// newer kernel installed but not running ("reboot-required"), and a
// reboot runs it.
func TestAptPackages(t *testing.T) {
	t.Parallel()
	for _, v := range Versions() {
		t.Run(v.Release, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{opts: Options{Version: v.Release}, nodes: []NodeSpec{{Name: "pve1"}, {Name: "pve2"}, {Name: "pve3", NoUpdates: true}}})
			a := e.c.rel.apt
			pending := decodeData[[]map[string]any](t, e.do(call{node: "pve2", path: "/nodes/pve1/apt/update"}))
			if len(pending) != 4 {
				t.Fatalf("pending %v", pending)
			}
			image := a.kernelPackage(a.update).name
			var sawImage bool
			for _, p := range pending {
				for _, k := range []string{"Package", "Version", "Title", "Priority", "Section", "Arch", "Origin", "Description"} {
					if s, _ := p[k].(string); s == "" {
						t.Errorf("%v has no %s", p, k)
					}
				}
				if p["Package"] == image {
					sawImage = true
					if _, has := p["OldVersion"]; has {
						t.Errorf("the new kernel has an OldVersion: %v", p)
					}
				} else if s, _ := p["OldVersion"].(string); s == "" {
					t.Errorf("an upgrade without OldVersion: %v", p)
				}
			}
			if !sawImage {
				t.Fatalf("no %s in %v", image, pending)
			}
			if up := decodeData[[]map[string]any](t, e.do(call{path: "/nodes/pve3/apt/update"})); len(up) != 0 {
				t.Fatalf("an up-to-date node lists %v", up)
			}

			upid := e.post("pve1", "/nodes/pve1/apt/update", nil)
			if !strings.Contains(upid, ":aptupdate::vmgate@pve!gw:") {
				t.Fatalf("UPID %s", upid)
			}
			e.c.Advance(aptUpdateDuration)
			log := e.logOf(upid)
			if log[0] != "starting apt-get update" || !strings.HasPrefix(log[1], "Hit:1 http://deb.pvesim.invalid/debian "+a.suite+" InRelease") ||
				log[len(log)-2] != "Reading package lists..." || log[len(log)-1] != "TASK OK" {
				t.Fatalf("aptupdate log %q", log)
			}
			quiet := e.post("pve1", "/nodes/pve1/apt/update", url.Values{"quiet": {"1"}})
			e.c.Advance(aptUpdateDuration)
			if log := e.logOf(quiet); !reflect.DeepEqual(log, []string{"TASK OK"}) {
				t.Fatalf("quiet aptupdate log %q", log)
			}

			versions := decodeData[[]map[string]any](t, e.do(call{path: "/nodes/pve1/apt/versions"}))
			if versions[0]["Package"] != "proxmox-ve" || versions[0]["RunningKernel"] != a.running.release ||
				versions[1]["Package"] != "pve-manager" || versions[1]["ManagerVersion"] != v.Version+"/"+v.RepoID ||
				versions[1]["OldVersion"] != v.Version {
				t.Fatalf("versions %v", versions[:2])
			}
			meta := a.kernelPrefix + a.kernelSeries
			for _, p := range versions {
				if p["CurrentState"] != "Installed" {
					t.Errorf("%v", p)
				}
				if p["Package"] == meta && (p["OldVersion"] != a.kernelMeta || p["Version"] != strings.TrimSuffix(a.update.release, "-pve")) {
					t.Errorf("the kernel meta package (installed, candidate): %v", p)
				}
			}

			out, err := e.c.InstallUpdates("pve1")
			if err != nil {
				t.Fatal(err)
			}
			if out[len(out)-1] != "reboot-required" || !strings.Contains(strings.Join(out, "\n"), "Setting up "+image+" ("+strings.TrimSuffix(a.update.release, "-pve")+") ...") {
				t.Fatalf("install output %q", out)
			}
			if up := decodeData[[]map[string]any](t, e.do(call{path: "/nodes/pve1/apt/update"})); len(up) != 0 {
				t.Fatalf("pending after the install: %v", up)
			}
			info := e.nodeInfo("pve1")
			if info.Kernel != a.running.release || info.NewestKernel != a.update.release || info.PendingUpdates != 0 {
				t.Fatalf("after the install: %+v", info)
			}
			versions = decodeData[[]map[string]any](t, e.do(call{path: "/nodes/pve1/apt/versions"}))
			if versions[0]["RunningKernel"] != a.running.release {
				t.Fatalf("running kernel %v", versions[0])
			}
			var kernels []string
			for _, p := range versions[2:] {
				if name := p["Package"].(string); strings.HasPrefix(name, a.kernelPrefix) && strings.Contains(name, "-pve") {
					kernels = append(kernels, name)
				}
			}
			if want := []string{image, a.kernelPackage(a.running).name}; !reflect.DeepEqual(kernels, want) {
				t.Fatalf("kernels %v, want newest first %v", kernels, want)
			}
			if again, _ := e.c.InstallUpdates("pve1"); again[len(again)-1] != "reboot-required" || !strings.Contains(strings.Join(again, "\n"), "0 upgraded, 0 newly installed") {
				t.Fatalf("a second install %q", again)
			}

			e.nodeCmd("pve1", "pve1", "reboot")
			e.c.Advance(10*time.Second + DefaultBootTime)
			st := decodeData[map[string]any](t, e.do(call{node: "pve2", path: "/nodes/pve1/status"}))
			if !strings.HasPrefix(st["kversion"].(string), "Linux "+a.update.release+" ") || st["uptime"].(float64) > 60 {
				t.Fatalf("after the reboot %v", st)
			}
			versions = decodeData[[]map[string]any](t, e.do(call{node: "pve2", path: "/nodes/pve1/apt/versions"}))
			if versions[0]["RunningKernel"] != a.update.release {
				t.Fatalf("running kernel after the reboot %v", versions[0])
			}
			if out, _ := e.c.InstallUpdates("pve1"); out[len(out)-1] == "reboot-required" {
				t.Fatalf("still asks for a reboot: %q", out)
			}
		})
	}
}

// TestAptPermissions: listing the updates and refreshing them need
// Sys.Modify, the versions Sys.Audit.
func TestAptPermissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		if err := c.AddToken("ro@pve!tk", "s3cret", TokenOptions{NoSysAudit: true}); err != nil {
			t.Fatal(err)
		}
	}})
	ro := map[string]string{"Authorization": "PVEAPIToken=ro@pve!tk=s3cret"}
	for _, tc := range []struct {
		method, path, line string
	}{
		{"GET", "/nodes/pve1/apt/update", "403 Permission check failed (/nodes/pve1, Sys.Modify)"},
		{"POST", "/nodes/pve1/apt/update", "403 Permission check failed (/nodes/pve1, Sys.Modify)"},
		{"GET", "/nodes/pve1/apt/versions", "403 Permission check failed (/nodes/pve1, Sys.Audit)"},
		{"GET", "/nodes/pve1/status", "403 Permission check failed (/nodes/pve1, Sys.Audit)"},
	} {
		wantLine(t, e.do(call{method: tc.method, path: tc.path, headers: ro, noAuth: true}), 403, tc.line)
	}
}
