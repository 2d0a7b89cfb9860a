package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/internal/store"
)

// storeWriterCollector exports which PostgreSQL host vmgate writes to and how
// many failovers it has followed (issue 25, docs/decisions/0118).
type storeWriterCollector struct {
	st        store.WriterReporter
	writer    *prometheus.Desc
	failovers *prometheus.Desc
}

// registerStoreWriter adds the store's writer series to reg when the store is
// PostgreSQL's; SQLite has no other host to fail over to.
func registerStoreWriter(reg prometheus.Registerer, st store.Store) {
	w, ok := st.(store.WriterReporter)
	if !ok {
		return
	}
	if _, pg := w.Writer(); !pg {
		return
	}
	reg.MustRegister(&storeWriterCollector{st: w,
		writer: prometheus.NewDesc("vmgate_store_writer", "1 for the PostgreSQL host (address) vmgate's newest connection writes to.",
			[]string{"host"}, nil),
		failovers: prometheus.NewDesc("vmgate_store_failovers_total", "Times vmgate's PostgreSQL writes moved to another host.",
			nil, nil),
	})
}

// Describe implements prometheus.Collector.
func (c *storeWriterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.writer
	ch <- c.failovers
}

// Collect implements prometheus.Collector.
func (c *storeWriterCollector) Collect(ch chan<- prometheus.Metric) {
	s, _ := c.st.Writer()
	if s.Host != "" {
		ch <- prometheus.MustNewConstMetric(c.writer, prometheus.GaugeValue, 1, s.Host)
	}
	ch <- prometheus.MustNewConstMetric(c.failovers, prometheus.CounterValue, float64(s.Failovers))
}
