package vmops

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
)

// TestRemoteRefusals: a pre-check's findings become the refusal the issue
// names, in its order: HA first, then the vmid, the unmapped devices (400
// naming each), the token's privileges, then any other blocker.
func TestRemoteRefusals(t *testing.T) {
	t.Parallel()
	vm := GuestRef{ClusterID: 1, Node: "pve1", VMID: 100}
	ok := RemotePrecheck{TargetClusterName: "b", VMIDFree: true, TargetVMID: 100,
		Disks:            []RemoteDisk{{Key: "scsi0", Volid: "ceph:vm-100-disk-0", Storage: "ceph", Target: "tank"}},
		NICs:             []RemoteNIC{{Key: "net0", Bridge: "vmbr0", Target: "vmbr1"}},
		TokenPermissions: []RemotePermission{{Path: "/", Privilege: "Sys.Incoming", Granted: true}}}
	with := func(f func(*RemotePrecheck)) RemotePrecheck {
		pc := ok
		pc.Disks = append([]RemoteDisk(nil), ok.Disks...)
		pc.NICs = append([]RemoteNIC(nil), ok.NICs...)
		pc.TokenPermissions = append([]RemotePermission(nil), ok.TokenPermissions...)
		f(&pc)
		return pc
	}
	for _, tc := range []struct {
		name   string
		pc     RemotePrecheck
		kind   errs.Kind
		reason string
		says   string
	}{
		{name: "nothing blocks", pc: ok},
		{"HA before all", with(func(p *RemotePrecheck) {
			p.HAManaged, p.VMIDFree = true, false
			p.Blockers = []string{"VM 100 is managed by HA …"}
		}), errs.Conflict, errs.ReasonHAManaged, "managed by HA"},
		{"vmid taken", with(func(p *RemotePrecheck) { p.VMIDFree, p.NextVMID = false, 106 }), errs.Conflict, errs.ReasonVMIDTaken, "next free vmid there is 106"},
		{"unmapped disk and NIC", with(func(p *RemotePrecheck) { p.Disks[0].Target, p.NICs[0].Target = "", "" }), errs.Invalid, "",
			"scsi0 (ceph:vm-100-disk-0); network devices without a target bridge: net0 (bridge vmbr0)"},
		{"token lacks", with(func(p *RemotePrecheck) { p.TokenPermissions[0].Granted = false }), errs.Conflict,
			errs.ReasonTargetTokenLacksPermissions, "lacks Sys.Incoming on /"},
		{"other blocker", with(func(p *RemotePrecheck) { p.Blockers = []string{"VM 100 is locked (backup)"} }), errs.Conflict,
			errs.ReasonMigrationBlocked, "locked (backup)"},
	} {
		err := remoteRefusal(vm, tc.pc)
		if tc.says == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		e, isErr := errs.As(err)
		if !isErr || e.Kind != tc.kind || e.Reason != tc.reason || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s: %#v, want %s %q saying %q", tc.name, err, tc.kind, tc.reason, tc.says)
		}
	}
}

// TestRemoteSupported: PVE 7.3 brought remote migration; an unknown version is
// taken for a current one.
func TestRemoteSupported(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"7.2-7": false, "7.3-3": true, "8.0.3": true, "9.1.4": true, "": true} {
		pv, _ := pve.ParseVersion(v)
		if got := remoteSupported(pv); got != want {
			t.Errorf("remoteSupported(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestMappingJSON: a mapping is a name for all or an object of pairs; PVE gets
// explicit pairs for the ids in use.
func TestMappingJSON(t *testing.T) {
	t.Parallel()
	var all, pairs Mapping
	if err := json.Unmarshal([]byte(`"tank"`), &all); err != nil || all.target("ceph") != "tank" {
		t.Fatalf("%+v %v", all, err)
	}
	if err := json.Unmarshal([]byte(`{"ceph":"tank","local-lvm":"fast"}`), &pairs); err != nil || pairs.target("local-lvm") != "fast" || pairs.target("nfs") != "" {
		t.Fatalf("%+v %v", pairs, err)
	}
	if got := pairs.pveMap([]string{"ceph", "local-lvm"}); got != "ceph:tank,local-lvm:fast" {
		t.Errorf("pveMap = %q", got)
	}
	if err := json.Unmarshal([]byte(`["tank"]`), &all); err == nil {
		t.Error("a list is taken for a mapping")
	}
	if err := (Mapping{Pairs: map[string]string{"ceph": "../x"}}).check("targetStorage"); errs.KindOf(err) != errs.Invalid {
		t.Errorf("a bad id: %v", err)
	}
}
