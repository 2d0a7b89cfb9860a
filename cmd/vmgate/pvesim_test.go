package main

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/pve"
)

// TestPVESimVersionFlag: `vmgate pvesim --pve-version` answers as that
// release, and an unknown release is refused before anything listens.
func TestPVESimVersionFlag(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "pvesim", "--listen", "127.0.0.1:0", "--pve-version", "7.4").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "8.0, 8.3, 8.4, 9.1") {
		t.Fatalf("--pve-version 7.4: %v\n%s", err, out)
	}

	sim := start(t, nil, "pvesim", "--listen", "127.0.0.1:0", "--auth-delay", "0s", "--pve-version", "8.3")
	var info simInfo
	if err := json.Unmarshal([]byte(sim.line(t, regexp.MustCompile(`^\{.*\}$`))[0]), &info); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // the fingerprint is checked below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if got := pve.Fingerprint(cs.PeerCertificates[0].Raw); got != info.Fingerprint {
				t.Errorf("certificate %s, announced %s", got, info.Fingerprint)
			}
			return nil
		}}}}
	req, _ := http.NewRequest("GET", info.URL+"/api2/json/version", nil)
	req.Header.Set("Authorization", "PVEAPIToken="+info.Token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Data struct{ Release, Version string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.Data.Release != "8.3" || v.Data.Version != "8.3.0" {
		t.Fatalf("/version = %+v, %v", v, err)
	}
}
