package webui

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// BenchmarkVMsPage10k measures a page of the VM list over 10 000 VMs: the whole
// request as the server answers it (fleet's inventory snapshot and filters, the
// sort, the page rendered), the default sort, a name search and filters. Within a
// snapshot's 2 s most iterations find it fresh; decision 0012 says what a page
// costs when PVE is read again. Issue 11 asks for page 1 in 200 ms of server time
// at most.
func BenchmarkVMsPage10k(b *testing.B) {
	e := newEnv(b, envOptions{})
	for i := range 10000 {
		if err := e.sim.AddVM(pvesim.VMSpec{VMID: 1000 + i, Node: []string{"pve1", "pve2", "pve3"}[i%3],
			Name: fmt.Sprintf("app-%05d", i), Running: i%2 == 0, Tags: "prod;web"}); err != nil {
			b.Fatal(err)
		}
	}
	br := e.browser()
	br.login(adminEmail)
	for _, path := range []string{"/vms", "/vms?q=app-09&sort=-name", "/vms?status=running&node=pve2&page=3"} {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				if p := br.get(path); p.status != http.StatusOK {
					b.Fatalf("%s: %d", path, p.status)
				}
			}
		})
	}
}
