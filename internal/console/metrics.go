package console

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the broker's figures: consoles open (a gauge read at scrape time)
// and the bytes relayed each way.
type metrics struct {
	toClient, toPVE prometheus.Counter
	opened, ended   *prometheus.CounterVec
	// relayed counts the same bytes for tests and the benchmark, without a registry.
	relayed atomic.Int64
	// all are the collectors, for Register.
	all []prometheus.Collector
}

func newMetrics(reg *prometheus.Registry, open func() int) *metrics {
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vmgate_console_bytes_total",
		Help: "Bytes the console broker relayed, by direction (to_client: from PVE's console; to_pve: the client's input).",
	}, []string{"direction"})
	opened := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vmgate_consoles_opened_total",
		Help: "Consoles opened, by type (vnc, term).",
	}, []string{"type"})
	ended := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vmgate_consoles_ended_total",
		Help: "Consoles ended, by why (closed, idle, max_length, session_ended, grant_lost, shutdown, pve_closed, error).",
	}, []string{"why"})
	all := []prometheus.Collector{bytes, opened, ended, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vmgate_consoles_open",
		Help: "Consoles this replica relays now.",
	}, func() float64 { return float64(open()) })}
	if reg != nil {
		reg.MustRegister(all...)
	}
	return &metrics{toClient: bytes.WithLabelValues("to_client"), toPVE: bytes.WithLabelValues("to_pve"),
		opened: opened, ended: ended, all: all}
}

// Register adds the broker's metrics to reg, for a server whose registry is made
// after the broker (Config.Registry registers them at once).
func (s *Service) Register(reg *prometheus.Registry) { reg.MustRegister(s.metrics.all...) }
