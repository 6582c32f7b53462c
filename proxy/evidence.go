package proxy

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// evidenceDrain bounds how long a shutdown waits for the evidence store to
// write the copies still queued.
const evidenceDrain = 5 * time.Second

// openEvidence opens the store of copies when evidence is on
// (cfg.EvidenceOn: enabled, with an audit file), which then keeps each
// body read and learns the copies records name; and registers its
// metrics, which read 0 when it is off.
func (s *Server) openEvidence(cfg *config.Config) error {
	s.metrics.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "robotsgate_evidence_dropped_total",
			Help: "Copies of sites' files not kept: the evidence store's queue was full, or writing failed.",
		}, func() float64 {
			if s.evidence == nil {
				return 0
			}
			return float64(s.evidence.Dropped())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "robotsgate_evidence_bytes",
			Help: "Bytes of the copies the evidence store keeps on disk.",
		}, func() float64 {
			if s.evidence == nil {
				return 0
			}
			return float64(s.evidence.Bytes())
		}),
	)
	if !cfg.EvidenceOn() {
		return nil
	}
	dir, err := cfg.StateDir()
	if err != nil {
		return fmt.Errorf("evidence store: %w", err)
	}
	st, err := evidence.Open(evidence.Options{
		Dir:       cfg.Evidence.DirPath(dir),
		Retention: cfg.Evidence.Retention,
		MaxBytes:  cfg.Evidence.MaxBytes,
		MaxBody:   max(evidence.DefaultMaxBody, 2*int64(cfg.Robots.MaxBytes)),
		Now:       s.opts.Now,
		Logger:    s.log,
	})
	if err != nil {
		return err
	}
	s.evidence, s.keep, s.named = st, st, st.Named
	return nil
}

// closeEvidence writes the copies still queued (for at most
// evidenceDrain) and closes the store.
func (s *Server) closeEvidence() error {
	if s.evidence == nil {
		return nil
	}
	return s.evidence.Close(evidenceDrain)
}
