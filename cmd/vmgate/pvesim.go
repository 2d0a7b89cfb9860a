package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// pvesimCmd serves the emulated dev cluster of docs/design.md §7. Its variables are
// PVESIM_* so they cannot clash with the server's VMGATE_*.
type pvesimCmd struct {
	Listen    string        `default:"127.0.0.1:8006" env:"PVESIM_LISTEN" help:"Address of the first node (pve1); the others listen on 127.0.0.12, 127.0.0.13 with the same port. Port 0 picks a free one."`
	Speed     float64       `default:"1" env:"PVESIM_SPEED" help:"Emulated seconds per real second (at 1 a live migration of VM 100 takes about 20 s)."`
	Plain     bool          `env:"PVESIM_PLAIN" help:"Serve plain HTTP instead of HTTPS."`
	AuthDelay time.Duration `default:"3s" env:"PVESIM_AUTH_DELAY" help:"Delay of authentication failures (PVE waits 3 s)."`
	VMs       int           `name:"vms" default:"6" env:"PVESIM_VMS" help:"VMs in the cluster: the dev cluster's six (100-105) and, beyond them, generated ones from VMID 1000 spread over the nodes (for benchmarks: --vms 10000)."`
	CTs       int           `name:"cts" default:"0" env:"PVESIM_CTS" help:"Containers beyond the dev cluster's four (200-203): generated ones from VMID 100000 spread over the nodes (for benchmarks: --cts 1000)."`
	Stats     string        `env:"PVESIM_STATS" placeholder:"ADDR" help:"Also serve, in plain HTTP on this address (loopback), the emulator's request counters per route as JSON; the first line then has a \"stats\" URL. For benchmarks."`
	Version   string        `name:"pve-version" default:"9.1" env:"PVESIM_PVE_VERSION" help:"The PVE release to answer as: 8.0, 8.3, 8.4 or 9.1 (docs/pve-versions.md lists what differs)."`
	Ceph      bool          `env:"PVESIM_CEPH" help:"Run Ceph on every node: /cluster/ceph/status and /cluster/ceph/flags answer, and a node away degrades the health."`
	HAPolicy  string        `name:"ha-shutdown-policy" default:"conditional" env:"PVESIM_HA_SHUTDOWN_POLICY" enum:"conditional,freeze,failover,migrate" help:"What the HA stack does with a node's HA guests when the node reboots or shuts down (datacenter.cfg's shutdown_policy)."`
}

// devVMs is how many VMs pvesim.DevCluster has.
const devVMs = 6

// Run serves until SIGINT or SIGTERM. The first line on stdout is a JSON
// object with the URL, the certificate fingerprint and the API token.
func (c *pvesimCmd) Run() error {
	if err := pvesim.CheckVersion(c.Version); err != nil {
		return fmt.Errorf("pvesim: --pve-version: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.CTs < 0 {
		return fmt.Errorf("pvesim: --cts must not be negative")
	}
	if c.VMs <= devVMs && c.CTs == 0 && c.Stats == "" {
		return pvesim.RunDev(ctx, pvesim.DevOptions{
			Listen:    c.Listen,
			Speed:     c.Speed,
			Plain:     c.Plain,
			AuthDelay: c.AuthDelay,
			Version:   c.Version,
			Ceph:      c.Ceph,

			HAShutdownPolicy: c.HAPolicy,
		}, os.Stdout, os.Stderr)
	}
	return c.runForBench(ctx)
}

// runForBench is RunDev with the benchmark's extras: more VMs and containers,
// and the counters.
// It lives here rather than in pvesim because only the benchmark wants it.
func (c *pvesimCmd) runForBench(ctx context.Context) error {
	sim := pvesim.DevCluster(pvesim.Options{Speed: c.Speed, AuthDelay: c.AuthDelay, Location: time.Local, Version: c.Version,
		Ceph: c.Ceph, HAShutdownPolicy: c.HAPolicy})
	nodes := sim.Nodes()
	for i := 0; i < c.VMs-devVMs; i++ {
		vmid := 1000 + i
		err := sim.AddVM(pvesim.VMSpec{
			VMID: vmid, Node: nodes[i%len(nodes)], Name: fmt.Sprintf("bench-%d", vmid), Running: i%2 == 0,
			Tags:  []string{"bench", "bench;web", "bench;db"}[i%3],
			Disks: []pvesim.Disk{{Name: "scsi0", Volid: fmt.Sprintf("ceph:vm-%d-disk-0", vmid), Size: 8 << 30}},
		})
		if err != nil {
			return fmt.Errorf("pvesim: %w", err)
		}
	}
	for i := 0; i < c.CTs; i++ {
		vmid := 100000 + i
		err := sim.AddCT(pvesim.CTSpec{
			VMID: vmid, Node: nodes[i%len(nodes)], Hostname: fmt.Sprintf("bench-ct-%d", vmid), Running: i%2 == 0,
			Tags:   []string{"bench", "bench;web", "bench;db"}[i%3],
			RootFS: pvesim.Disk{Volid: fmt.Sprintf("ceph:vm-%d-disk-0", vmid), Size: 4 << 30},
		})
		if err != nil {
			return fmt.Errorf("pvesim: %w", err)
		}
	}
	srv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: !c.Plain, Listen: c.Listen})
	if err != nil {
		return fmt.Errorf("pvesim: %w", err)
	}
	defer srv.Close()
	ann := struct {
		pvesim.DevAnnouncement
		Stats string `json:"stats,omitempty"`
	}{}
	eps := srv.Endpoints()
	ann.URL, ann.Fingerprint, ann.Token = eps[0].URL, eps[0].Fingerprint, sim.DevToken()
	if c.Stats != "" {
		ln, err := net.Listen("tcp", c.Stats)
		if err != nil {
			return fmt.Errorf("pvesim: stats: %w", err)
		}
		if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
			ln.Close()
			return fmt.Errorf("pvesim: stats: %s is not a loopback address", c.Stats)
		}
		hs := &http.Server{Handler: statsHandler(sim), ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(ln)
		defer hs.Close()
		ann.Stats = "http://" + ln.Addr().String() + "/"
	}
	line, err := json.Marshal(ann)
	if err != nil {
		return fmt.Errorf("pvesim: %w", err)
	}
	show("%s", line)
	for _, w := range srv.Warnings() {
		say("pvesim: warning: %s", w)
	}
	say("pvesim: %d VMs and %d containers on %d nodes at %s; interrupt to stop", max(c.VMs, devVMs), 4+c.CTs, len(nodes), eps[0].URL)
	<-ctx.Done()
	return nil
}

// statsHandler answers every route's request count ("GET /cluster/resources": 3),
// leaving out the routes never asked for.
func statsHandler(sim *pvesim.Cluster) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counts := map[string]int{}
		for _, rt := range pvesim.Routes() {
			if n := sim.Requests(rt.Method, rt.Path); n > 0 {
				counts[rt.Method+" "+rt.Path] = n
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(counts)
	})
}
