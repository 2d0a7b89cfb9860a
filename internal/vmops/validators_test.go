package vmops

import "testing"

func TestValidators(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"UPID:pve1:0000A1B2:0001C3D4:65F0A1B2:qmstart:100:vmgate@pve!gw:": true,
		"UPID:pve1:x": false,
		"":            false,
	} {
		if got := ValidTaskID(id); got != want {
			t.Errorf("ValidTaskID(%q) = %v", id, got)
		}
	}
	if !ValidNode("pve1") || ValidNode("../etc") || ValidNode("") {
		t.Error("ValidNode")
	}
}
