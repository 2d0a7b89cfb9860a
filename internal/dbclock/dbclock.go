// Package dbclock watches how far this replica's clock is from the database's.
//
// Replicas share one database and nothing else, so the database's clock is the
// one clock they can all be held to. A replica whose clock is off issues tokens
// the others refuse (their iat lies beyond auth's leeway, 30 s, in the other
// replica's future), and refuses theirs; a restarted process whose clock
// stepped back refuses its own. vmgate cannot set the clock; it can notice and
// step aside: the Monitor measures the offset at start and every minute
// (store.Store's ClockOffset: PostgreSQL's clock_timestamp(); on SQLite the
// database is a file this process reads, with no clock of its own, so the
// offset is 0), exports it as the gauge vmgate_db_clock_offset_seconds, logs a
// warning above Warn (5 s) and, above Fail (30 s), makes /readyz answer 503
// clock_skew, so that a load balancer takes the replica out of rotation until
// its clock is right again. docs/decisions/0031 says what else was weighed.
package dbclock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/internal/errs"
)

// ReasonClockSkew (kind Unavailable, 503) is /readyz's reason while the
// replica's clock is more than Config.Fail off the database's.
const ReasonClockSkew = "clock_skew"

// Defaults of Config.
const (
	DefaultEvery = time.Minute
	DefaultWarn  = 5 * time.Second
	DefaultFail  = 30 * time.Second
)

// Config is what New needs. Measure is required.
type Config struct {
	// Measure returns the database's clock less this replica's
	// (store.Store.ClockOffset).
	Measure func(ctx context.Context) (time.Duration, error)
	Every   time.Duration // between measurements [DefaultEvery]
	Warn    time.Duration // an offset beyond it is logged [DefaultWarn]
	Fail    time.Duration // beyond it the replica is not ready [DefaultFail]
	Logger  *slog.Logger
	// After is the clock Run waits on [time.After]; tests drive it.
	After func(time.Duration) <-chan time.Time
}

// Monitor keeps the last measured offset. It is safe for concurrent use.
type Monitor struct {
	cfg Config

	mu       sync.Mutex
	offset   time.Duration
	measured bool
}

// New returns a Monitor that has measured nothing yet.
func New(cfg Config) *Monitor {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Warn <= 0 {
		cfg.Warn = DefaultWarn
	}
	if cfg.Fail <= 0 {
		cfg.Fail = DefaultFail
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	return &Monitor{cfg: cfg}
}

// Check measures the offset once and keeps it. A measurement that fails keeps
// the last one (the store's own check says the database is gone).
func (m *Monitor) Check(ctx context.Context) error {
	off, err := m.cfg.Measure(ctx)
	if err != nil {
		return fmt.Errorf("measure the clock offset to the database: %w", err)
	}
	m.mu.Lock()
	m.offset, m.measured = off, true
	m.mu.Unlock()
	switch a := abs(off); {
	case a > m.cfg.Fail:
		m.cfg.Logger.Error("this replica's clock is far off the database's: it is not ready until its clock is set right",
			"offset", -off, "limit", m.cfg.Fail)
	case a > m.cfg.Warn:
		m.cfg.Logger.Warn("this replica's clock is off the database's; check its time synchronisation (NTP)",
			"offset", -off, "warn_above", m.cfg.Warn, "unready_above", m.cfg.Fail)
	}
	return nil
}

// Run measures at once and then every Config.Every until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	for {
		if err := m.Check(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn(err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.cfg.After(m.cfg.Every):
		}
	}
}

// Offset is how far this replica's clock is ahead of the database's, as last
// measured (negative: behind); ok is false before a measurement.
func (m *Monitor) Offset() (offset time.Duration, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return -m.offset, m.measured
}

// Ready is /readyz's check: an error of reason clock_skew while the last
// measured offset is beyond Config.Fail.
func (m *Monitor) Ready(context.Context) error {
	off, ok := m.Offset()
	if !ok || abs(off) <= m.cfg.Fail {
		return nil
	}
	side := "ahead of"
	if off < 0 {
		side = "behind"
	}
	return &errs.Error{Kind: errs.Unavailable, Reason: ReasonClockSkew, RetryAfter: int(DefaultEvery / time.Second),
		Message: fmt.Sprintf("this replica's clock is %s %s the database's, more than %s: the other replicas would refuse "+
			"the tokens it issues; set its clock right (NTP) and it is ready again within a minute",
			off.Round(time.Second), side, m.cfg.Fail)}
}

// offsetDesc is the gauge's description.
var offsetDesc = prometheus.NewDesc("vmgate_db_clock_offset_seconds",
	"How far this replica's clock is ahead of the database's (negative: behind), as last measured.", nil, nil)

// Describe implements prometheus.Collector.
func (m *Monitor) Describe(ch chan<- *prometheus.Desc) { ch <- offsetDesc }

// Collect implements prometheus.Collector: nothing before the first measurement.
func (m *Monitor) Collect(ch chan<- prometheus.Metric) {
	if off, ok := m.Offset(); ok {
		ch <- prometheus.MustNewConstMetric(offsetDesc, prometheus.GaugeValue, off.Seconds())
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
