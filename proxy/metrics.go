package proxy

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// metrics are docs/operations.md's Prometheus metrics ("Metrics"), in a registry of the
// server's own. Label values are bounded: decisions, schemes, outcomes and
// results, never a URL, host or token.
type metrics struct {
	reg           *prometheus.Registry
	requests      *prometheus.CounterVec
	fetches       *prometheus.CounterVec
	fetchDuration prometheus.Histogram
	upstream      prometheus.Histogram
	pacedWait     prometheus.Histogram
	reloads       *prometheus.CounterVec
	// reloadOK is 1 when the last reload was applied (or none was
	// tried), 0 when it was refused and the config before it runs on.
	reloadOK prometheus.Gauge
	// auditErrors counts audit lines that could not be written.
	auditErrors   prometheus.Counter
	backoffs      prometheus.Counter
	clusterErrors prometheus.Counter
	signed        prometheus.Counter     // requests sent with a Web Bot Auth signature
	payments      *prometheus.CounterVec // sites' 402s with a price, by result
	spent         *spentMetric           // what sites charged, by currency
	// trailerStatements counts trailers that refused a declared purpose
	// after the body was sent (watchTrailer).
	trailerStatements prometheus.Counter
	// answers counts the origins' own answers to forwarded requests, by
	// class, resolved once.
	answers [audit.NumAnswerClasses]prometheus.Counter
	handler http.Handler
	// byDecision holds the requests counter of each decision for http
	// and https, resolved once: a label lookup per request costs.
	byDecision [policy.NumActions][2]prometheus.Counter
}

// newMetrics registers the metrics; cacheStats and conns are read when
// /metrics is scraped, not before.
func newMetrics(cacheStats func() fetch.CacheStats, conns *connTracker) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	// go_* and process_*: what every Prometheus dashboard expects.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "robotsgate_requests_total",
		Help: "Requests decided, by decision (allowed or the X-Robots-Gate value) and scheme.",
	}, []string{"decision", "scheme"})
	m.fetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "robotsgate_robots_fetches_total",
		Help: "robots.txt fetches, by outcome (fetched, unavailable, unreachable).",
	}, []string{"outcome"})
	m.fetchDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "robotsgate_robots_fetch_duration_seconds",
		Help:    "Time to fetch a robots.txt, redirects and body included.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	})
	m.upstream = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "robotsgate_upstream_duration_seconds",
		Help:    "Time from sending a proxied request upstream to its response headers.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.pacedWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "robotsgate_paced_wait_seconds",
		Help:    "Time requests waited for their origin's pacing slot.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
	})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "robotsgate_config_reloads_total",
		Help: "Config reloads (SIGHUP), by result (success, failure).",
	}, []string{"result"})
	m.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "robotsgate_config_last_reload_successful",
		Help: "1 when the last config reload (SIGHUP) was applied, or none was tried; 0 when it was refused and the config before it is still in force.",
	})
	m.reloadOK.Set(1)
	m.auditErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "robotsgate_audit_write_errors_total",
		Help: "Audit log lines (records and checkpoints) that could not be written: each is also logged on stderr.",
	})
	m.backoffs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "robotsgate_origin_backoffs_total",
		Help: "Times an origin's 429, or 503 with Retry-After, held its host.",
	})
	m.clusterErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "robotsgate_cluster_errors_total",
		Help: "Calls to the fleet's Redis that failed or timed out ([cluster]); the instance went on alone.",
	})
	m.signed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "robotsgate_signed_requests_total",
		Help: "Requests sent with a Web Bot Auth signature ([identity]): forwarded requests, robots.txt and usage-file fetches, and their redirect hops.",
	})
	answers := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "robotsgate_upstream_responses_total",
		Help: "The origins' own answers to forwarded requests, by class (2xx, 3xx, 4xx, 429, 5xx; 1xx for WebSockets).",
	}, []string{"class"})
	for i := range m.answers {
		m.answers[i] = answers.WithLabelValues(audit.AnswerClass(i).String())
	}
	m.trailerStatements = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "robotsgate_usage_trailer_statements_total",
		Help: "Responses to requests that declare purposes whose trailer, arriving after the body was sent, refused one (logged, not enforced).",
	})
	m.reg.MustRegister(m.requests, m.fetches, m.fetchDuration, m.upstream, m.pacedWait, m.reloads, m.reloadOK, m.auditErrors, m.backoffs, m.clusterErrors, m.signed, answers, m.trailerStatements)
	m.reg.MustRegister(stateMetrics(cacheStats, conns)...)
	for _, a := range policy.Actions() {
		m.byDecision[a] = [2]prometheus.Counter{m.requests.WithLabelValues(a.String(), "http"), m.requests.WithLabelValues(a.String(), "https")}
	}
	for _, o := range []fetch.Outcome{fetch.Fetched, fetch.Unavailable, fetch.Unreachable} {
		m.fetches.WithLabelValues(string(o))
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.payments, m.spent = newPaymentMetrics(m.reg)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// stateMetrics are the gauges and counters read from the robots.txt
// cache's stats and the connection tracker when /metrics is scraped.
func stateMetrics(cacheStats func() fetch.CacheStats, conns *connTracker) []prometheus.Collector {
	stat := func(f func(fetch.CacheStats) float64) func() float64 {
		return func() float64 { return f(cacheStats()) }
	}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "robotsgate_cache_hits_total", Help: "Lookups answered by cached rules."},
			stat(func(s fetch.CacheStats) float64 { return float64(s.Hits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "robotsgate_cache_cold_hits_total", Help: "Lookups answered by cached rules read back from the cold tier (a few microseconds), not the hot tier."},
			stat(func(s fetch.CacheStats) float64 { return float64(s.ColdHits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "robotsgate_cache_misses_total", Help: "Lookups that needed a fetch, or found the origin failing."},
			stat(func(s fetch.CacheStats) float64 { return float64(s.Misses) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "robotsgate_cache_evictions_total", Help: "Origins whose cached rules and state were forgotten for room."},
			stat(func(s fetch.CacheStats) float64 { return float64(s.Evictions) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_cache_bytes", Help: "Memory held by cached rules and origin state, heap counted at twice its live bytes: what robots.cache_max_bytes bounds."},
			stat(func(s fetch.CacheStats) float64 { return float64(s.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_cache_hot_bytes", Help: "Live heap bytes of the hot tier: rules ready to decide on, matchers counted built."},
			stat(func(s fetch.CacheStats) float64 { return float64(s.HotBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_cache_cold_bytes", Help: "Bytes of the cold tier's compressed rules, held off the Go heap."},
			stat(func(s fetch.CacheStats) float64 { return float64(s.ColdBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_open_connections", Help: "Client connections open."},
			func() float64 { return float64(conns.count.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_open_tunnels", Help: "CONNECT tunnels and WebSockets open."},
			func() float64 { return float64(conns.tunnels.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_max_connections", Help: "limits.max_connections as in force: client connections past it are answered 503 (overloaded)."},
			func() float64 { return float64(conns.max) }),
	}
}

// fleetMetrics are the gauges of what holds requests now and, with
// [cluster] (c not nil), of the fleet's Redis, read when /metrics is
// scraped.
func fleetMetrics(backoffs *pace.Backoffs, c *cluster.Client) []prometheus.Collector {
	out := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_backoff_hosts", Help: "Hosts held now by their origin's back-off (a 429, or a 503 with Retry-After); with [cluster], the fleet's, as each instance applies them."},
			func() float64 {
				n := 0
				for _, h := range backoffs.Holds() {
					if !h.Until.IsZero() {
						n++
					}
				}
				return float64(n)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_backoff_longest_seconds", Help: "How long the oldest run of back-offs that can still continue has lasted, from its host's first hold to now while held, or to the last hold's end in a gap: a hold that begins within its last one's length of that one's end continues the run, so a host counts while held and for as long again after each hold; 0 when no host's run can continue. Hosts taking turns keep it at one hold's length."},
			func() float64 { return backoffs.Longest().Seconds() }),
	}
	if c != nil {
		out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "robotsgate_cluster_up", Help: "1 while the fleet's Redis answers ([cluster]), 0 while this instance goes on with its own state; absent without [cluster]."},
			func() float64 {
				if c.Status().Up {
					return 1
				}
				return 0
			}))
	}
	return out
}

// observeFetch records one robots.txt fetch.
func (m *metrics) observeFetch(_ fetch.Origin, r *fetch.Result) {
	m.fetches.WithLabelValues(string(r.Outcome)).Inc()
	m.fetchDuration.Observe(r.Duration.Seconds())
}

// countRequest counts a decided request.
func (m *metrics) countRequest(a policy.Action, scheme string) {
	if int(a) >= policy.NumActions {
		return
	}
	i := 0
	if scheme == "https" {
		i = 1
	}
	m.byDecision[a][i].Inc()
}
