package pvesim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// benchClients is how many clients hit the emulator at once.
const benchClients = 64

// benchCluster serves a cluster on plain HTTP with one VM per client.
func benchCluster(b *testing.B, speed float64) (*Cluster, string, *http.Client, func()) {
	b.Helper()
	c := New(Options{Speed: speed})
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		if err := c.AddNode(NodeSpec{Name: n}); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < benchClients; i++ {
		if err := c.AddVM(VMSpec{VMID: 1000 + i, Node: "pve1"}); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.AddToken(testTokenID, testSecret, TokenOptions{}); err != nil {
		b.Fatal(err)
	}
	srv, err := c.Serve(context.Background(), ServeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConns: 2 * benchClients, MaxIdleConnsPerHost: 2 * benchClients}
	return c, srv.Endpoints()[0].URL + "/api2/json", &http.Client{Transport: tr}, func() {
		tr.CloseIdleConnections()
		srv.Close()
	}
}

func benchDo(client *http.Client, method, u string) (json.RawMessage, error) {
	req, _ := http.NewRequest(method, u, nil)
	req.Header.Set("Authorization", "PVEAPIToken="+testTokenID+"="+testSecret)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s %s: %s", method, u, resp.Status)
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	err = json.Unmarshal(body, &env)
	return env.Data, err
}

func setClients(b *testing.B) {
	p := (benchClients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
	b.SetParallelism(p)
}

// BenchmarkTaskStatus: 64 clients reading a task's status.
func BenchmarkTaskStatus(b *testing.B) {
	_, base, client, stop := benchCluster(b, 1)
	defer stop()
	data, err := benchDo(client, "POST", base+"/nodes/pve1/qemu/1000/status/start")
	if err != nil {
		b.Fatal(err)
	}
	var upid string
	json.Unmarshal(data, &upid)
	statusURL := base + "/nodes/pve1/tasks/" + url.PathEscape(upid) + "/status"
	setClients(b)
	b.ReportAllocs()
	b.ResetTimer()
	began := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := benchDo(client, "GET", statusURL); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "req/s")
}

// BenchmarkStartStop: 64 clients, each starting and stopping its own VM and
// polling the task status until each task has ended. One op is a full
// start+stop round trip; req/s counts every HTTP request.
func BenchmarkStartStop(b *testing.B) {
	_, base, client, stop := benchCluster(b, 10000) // a 1 s start takes 0.1 ms
	defer stop()
	var next, requests atomic.Int64
	run := func(vmid int64, op string) error {
		data, err := benchDo(client, "POST", fmt.Sprintf("%s/nodes/pve1/qemu/%d/status/%s", base, vmid, op))
		requests.Add(1)
		if err != nil {
			return err
		}
		var upid string
		json.Unmarshal(data, &upid)
		statusURL := base + "/nodes/pve1/tasks/" + url.PathEscape(upid) + "/status"
		for {
			data, err := benchDo(client, "GET", statusURL)
			requests.Add(1)
			if err != nil {
				return err
			}
			if strings.Contains(string(data), `"status":"stopped"`) {
				if !strings.Contains(string(data), `"exitstatus":"OK"`) {
					return fmt.Errorf("%s of %d: %s", op, vmid, data)
				}
				return nil
			}
		}
	}
	setClients(b)
	b.ResetTimer()
	began := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		vmid := 1000 + next.Add(1) - 1
		for pb.Next() {
			if err := run(vmid, "start"); err != nil {
				b.Error(err)
				return
			}
			if err := run(vmid, "stop"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(began).Seconds()
	b.ReportMetric(float64(b.N)/elapsed, "roundtrips/s")
	b.ReportMetric(float64(requests.Load())/elapsed, "req/s")
}

// BenchmarkClusterResources10k: one client listing 10 000 VMs (the body is
// read, gzip-compressed as Go's client asks, but not decoded).
func BenchmarkClusterResources10k(b *testing.B) {
	benchResources(b, func(c *Cluster, i int) error {
		return c.AddVM(VMSpec{VMID: 100 + i, Node: "pve1", Running: i%2 == 0, Disks: sharedDisk(100 + i)})
	})
}

// BenchmarkClusterResourcesGuests10k: the same with every other guest a
// container, as a fleet of both kinds is listed.
func BenchmarkClusterResourcesGuests10k(b *testing.B) {
	benchResources(b, func(c *Cluster, i int) error {
		if i%2 == 1 {
			return c.AddCT(CTSpec{VMID: 100 + i, Node: "pve1", Running: i%4 == 1, RootFS: sharedRootFS(100 + i)})
		}
		return c.AddVM(VMSpec{VMID: 100 + i, Node: "pve1", Running: i%4 == 0, Disks: sharedDisk(100 + i)})
	})
}

func benchResources(b *testing.B, add func(c *Cluster, i int) error) {
	c := New(Options{})
	c.AddNode(NodeSpec{Name: "pve1"})
	c.AddToken(testTokenID, testSecret, TokenOptions{})
	for i := 0; i < 10000; i++ {
		if err := add(c, i); err != nil {
			b.Fatal(err)
		}
	}
	srv, err := c.Serve(context.Background(), ServeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	client := &http.Client{}
	u := srv.Endpoints()[0].URL + "/api2/json/cluster/resources?type=vm"
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "PVEAPIToken="+testTokenID+"="+testSecret)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n < 10000*200 {
			b.Fatalf("%s, %d bytes", resp.Status, n)
		}
	}
}
