package httpapi

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
)

// BenchmarkFleetGuestsAnswer is the answer of the fleet's guest list of 20
// clusters × 5 000 guests from fresh snapshots (issue 18 (docs/history.md)):
// what vmgate does per request beyond taking the snapshots' sub-slices, which
// costs nothing per guest. One iteration is one whole answer (~25 MB).
//
//	go test -run '^$' -bench FleetGuestsAnswer -benchtime 20x ./internal/httpapi/
func BenchmarkFleetGuestsAnswer(b *testing.B) {
	var parts guestItems
	tagSets := [][]string{{"bench"}, {"bench", "web"}, {"bench", "db"}}
	for c := range 20 {
		guests := make([]fleet.VMView, 5000)
		for i := range guests {
			kind := pve.Qemu
			if i >= 3750 {
				kind = pve.LXC
			}
			guests[i] = fleet.VMView{VMID: int64(1000 + i), Type: kind, Name: fmt.Sprintf("bench-%d", 1000+i),
				Node: fmt.Sprintf("pve%d", i%3+1), Status: "running", Tags: tagSets[i%3], MaxMem: 2 << 30, MaxCPU: 2,
				Mem: 1 << 30, CPU: 0.0123, Uptime: 123456}
		}
		parts = append(parts, fleet.ClusterGuests{ClusterID: int64(c + 1), Name: fmt.Sprintf("fleet-%02d", c+1), Guests: guests})
	}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		writeEncoded(w, http.StatusOK, "success", parts, nil)
	}
}
