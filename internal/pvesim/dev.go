package pvesim

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// DevTokenID is the API token of the dev cluster.
const DevTokenID = "vmgate@pve!gw"

// DevCluster builds the dev cluster of docs/design.md §7: nodes pve1–pve3, VMs
// 100 (pve1, running), 101 (pve1, stopped), 102 (pve2, running, local disk),
// 103 (pve2, running, HA-managed), 104 (pve3, running, ignores ACPI) and 105
// (pve3, stopped), containers 200 (pve1, running, rootfs on shared storage),
// 201 (pve2, stopped), 202 (pve3, running, rootfs on local-lvm, which a
// migration copies) and 203 (pve1, running, HA-managed), plus the token
// DevTokenID with a random UUID secret (see DevToken) and DevTokenPrivileges;
// VM 100 has a serial port (serial0) for its terminal. The guests that run
// have onboot set (200 starts first, then 100, after which startall waits
// 5 s), so a node's reboot brings them back as PVE would.
func DevCluster(opts Options) *Cluster {
	c := New(opts)
	for _, name := range []string{"pve1", "pve2", "pve3"} {
		must(c.AddNode(NodeSpec{Name: name, CPUs: 16, MemBytes: 64 << 30, DiskBytes: 100 << 30}))
	}
	shared := func(vmid int, size int64) []Disk {
		return []Disk{{Name: "scsi0", Volid: fmt.Sprintf("ceph:vm-%d-disk-0", vmid), Size: size}}
	}
	for _, v := range []VMSpec{
		{VMID: 100, Node: "pve1", Name: "web1", Running: true, CPUs: 2, MemBytes: 4 << 30, Disks: shared(100, 32<<30), Tags: "web;prod",
			OnBoot: true, Startup: "order=2,up=5", Serial: "serial0"},
		{VMID: 101, Node: "pve1", Name: "db-staging", CPUs: 4, MemBytes: 8 << 30, Disks: shared(101, 64<<30), Pool: "staging"},
		{VMID: 102, Node: "pve2", Name: "build1", Running: true, CPUs: 4, MemBytes: 2 << 30,
			Disks: []Disk{{Name: "scsi0", Volid: "local-lvm:vm-102-disk-0", Size: 8 << 30, Local: true}}, OnBoot: true},
		{VMID: 103, Node: "pve2", Name: "ha-app", Running: true, CPUs: 2, MemBytes: 2 << 30, Disks: shared(103, 16<<30), HA: true},
		{VMID: 104, Node: "pve3", Name: "legacy-win", Running: true, CPUs: 2, MemBytes: 4 << 30, Disks: shared(104, 64<<30), IgnoreACPI: true,
			OnBoot: true},
		{VMID: 105, Node: "pve3", Name: "archive", CPUs: 1, MemBytes: 1 << 30, Disks: shared(105, 8<<30)},
	} {
		must(c.AddVM(v))
	}
	rootfs := func(vmid int, size int64) Disk {
		return Disk{Volid: fmt.Sprintf("ceph:vm-%d-disk-0", vmid), Size: size}
	}
	for _, ct := range []CTSpec{
		{VMID: 200, Node: "pve1", Hostname: "proxy", Running: true, Cores: 2, MemBytes: 1 << 30, SwapBytes: 512 << 20,
			RootFS: rootfs(200, 8<<30), Tags: "web;prod", Unprivileged: true, OnBoot: true, Startup: "order=1"},
		{VMID: 201, Node: "pve2", Hostname: "dns-staging", Cores: 1, MemBytes: 512 << 20, SwapBytes: 512 << 20,
			RootFS: rootfs(201, 4<<30), Unprivileged: true, Pool: "staging"},
		{VMID: 202, Node: "pve3", Hostname: "cache", Running: true, Cores: 2, MemBytes: 2 << 30, SwapBytes: 512 << 20,
			RootFS: Disk{Volid: "local-lvm:vm-202-disk-0", Size: 8 << 30, Local: true}, Unprivileged: true, OnBoot: true},
		{VMID: 203, Node: "pve1", Hostname: "ha-ct", Running: true, Cores: 1, MemBytes: 1 << 30, SwapBytes: 512 << 20,
			RootFS: rootfs(203, 8<<30), HA: true, Unprivileged: true},
	} {
		must(c.AddCT(ct))
	}
	secret := newUUID()
	must(c.AddToken(DevTokenID, secret, TokenOptions{VMPrivileges: DevTokenPrivileges}))
	c.mu.Lock()
	c.devToken = DevTokenID + "=" + secret
	c.mu.Unlock()
	return c
}

// DevTokenPrivileges are the dev token's privileges on every VM: the
// default ones and VM.Console, which a console needs.
var DevTokenPrivileges = []string{"VM.Audit", "VM.PowerMgmt", "VM.Migrate", "VM.Config.Disk", "VM.Console"}

// DevToken is the dev cluster's token as a client sends it:
// "USER@REALM!TOKENID=SECRET". It is empty for other clusters.
func (c *Cluster) DevToken() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.devToken
}

func must(err error) {
	if err != nil {
		panic("pvesim: " + err.Error())
	}
}

func newUUID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// DevOptions configure RunDev (the flags of `vmgate pvesim`).
type DevOptions struct {
	Listen    string        // the first node's address; port 0 picks a free one
	Speed     float64       // emulated seconds per real second
	Plain     bool          // HTTP instead of HTTPS
	AuthDelay time.Duration // delay of 401 answers (PVE: 3 s)
	Version   string        // the PVE release to answer as (Options.Version)
	Ceph      bool          // a hyper-converged cluster (Options.Ceph)
	// HAShutdownPolicy is the HA stack's shutdown_policy
	// (Options.HAShutdownPolicy).
	HAShutdownPolicy string
}

// DevAnnouncement is the first line RunDev prints: where the cluster is and
// how to log in.
type DevAnnouncement struct {
	URL         string `json:"url"`
	Fingerprint string `json:"fingerprint"`
	Token       string `json:"token"`
}

// RunDev serves the dev cluster until ctx ends. Its first line on stdout is
// one JSON DevAnnouncement; one line per node goes to stderr.
func RunDev(ctx context.Context, opts DevOptions, stdout, stderr io.Writer) error {
	if err := CheckVersion(opts.Version); err != nil {
		return fmt.Errorf("pvesim: %w", err)
	}
	if err := CheckHAShutdownPolicy(opts.HAShutdownPolicy); err != nil {
		return fmt.Errorf("pvesim: %w", err)
	}
	c := DevCluster(Options{Speed: opts.Speed, AuthDelay: opts.AuthDelay, Location: time.Local, Version: opts.Version,
		Ceph: opts.Ceph, HAShutdownPolicy: opts.HAShutdownPolicy})
	srv, err := c.Serve(ctx, ServeOptions{TLS: !opts.Plain, Listen: opts.Listen})
	if err != nil {
		return fmt.Errorf("pvesim: %w", err)
	}
	defer srv.Close()
	eps := srv.Endpoints()
	line, err := json.Marshal(DevAnnouncement{URL: eps[0].URL, Fingerprint: eps[0].Fingerprint, Token: c.DevToken()})
	if err != nil {
		return fmt.Errorf("pvesim: %w", err)
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return fmt.Errorf("pvesim: %w", err)
	}
	for _, w := range srv.Warnings() {
		fmt.Fprintf(stderr, "pvesim: warning: %s\n", w)
	}
	for _, ep := range eps {
		fmt.Fprintf(stderr, "pvesim: node %s at %s (fingerprint %s)\n", ep.Node, ep.URL, ep.Fingerprint)
	}
	speed := opts.Speed
	if speed <= 0 {
		speed = 1
	}
	v := c.Version()
	ceph := "no Ceph"
	if opts.Ceph {
		ceph = "Ceph on every node"
	}
	fmt.Fprintf(stderr, "pvesim: PVE %s (pve-manager %s, qemu-server %s, pve-container %s); time runs at %gx; VMs 100-105, containers 200-203; %s; interrupt to stop\n",
		v.Release, v.Version, v.QemuServer, v.Container, speed, ceph)
	fmt.Fprintf(stderr, "pvesim: test-only controls below %s (e.g. POST %s/_pvesim/nodes/pve1/apt/install), authenticated with the token\n",
		ControlPrefix, eps[0].URL)
	<-ctx.Done()
	return nil
}
