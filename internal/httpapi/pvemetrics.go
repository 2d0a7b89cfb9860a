package httpapi

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/internal/fleet"
)

// upstreamStats is the part of the fleet that counts its PVE clients' work.
type upstreamStats interface {
	ClientStats() map[int64]fleet.UpstreamStats
}

// pveCollector exposes the PVE clients' counters per cluster: how much vmgate asks
// of each cluster, how often it opens connections, fails over, retries, or meets a
// certificate it does not trust. Read at scrape time; nothing is kept here.
type pveCollector struct {
	stats func() map[int64]fleet.UpstreamStats
}

var pveCounters = []struct {
	desc *prometheus.Desc
	get  func(fleet.UpstreamStats) int64
}{
	{prometheus.NewDesc("vmgate_pve_requests_total", "HTTP requests sent to PVE (attempts, retries included).", []string{"cluster"}, nil),
		func(s fleet.UpstreamStats) int64 { return s.Requests }},
	{prometheus.NewDesc("vmgate_pve_connections_total", "TLS connections opened to PVE.", []string{"cluster"}, nil),
		func(s fleet.UpstreamStats) int64 { return s.NewConns }},
	{prometheus.NewDesc("vmgate_pve_failovers_total", "Attempts abandoned for the cluster's next endpoint.", []string{"cluster"}, nil),
		func(s fleet.UpstreamStats) int64 { return s.Failovers }},
	{prometheus.NewDesc("vmgate_pve_retries_total", "Extra read rounds after failures.", []string{"cluster"}, nil),
		func(s fleet.UpstreamStats) int64 { return s.Retries }},
	{prometheus.NewDesc("vmgate_pve_tls_failures_total", "Handshakes refused by the pinned fingerprint or the CA.", []string{"cluster"}, nil),
		func(s fleet.UpstreamStats) int64 { return s.TLSFailures }},
}

func (c pveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, pc := range pveCounters {
		ch <- pc.desc
	}
}

func (c pveCollector) Collect(ch chan<- prometheus.Metric) {
	for id, st := range c.stats() {
		label := strconv.FormatInt(id, 10)
		for _, pc := range pveCounters {
			ch <- prometheus.MustNewConstMetric(pc.desc, prometheus.CounterValue, float64(pc.get(st)), label)
		}
	}
}
