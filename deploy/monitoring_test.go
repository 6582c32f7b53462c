// Package deploy holds what operators deploy beside the binary: the
// Kubernetes manifests (deploy/kubernetes), the Grafana dashboard
// (deploy/grafana) and the Prometheus alerting rules (deploy/prometheus).
// Its test holds the dashboard and the rules to the metrics the binary
// exports; CI checks the rules with promtool (check rules, and test rules
// with deploy/prometheus/alerts_test.yml).
package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/robotsgate/robotsgate/proxy"
	"github.com/robotsgate/robotsgate/proxy/config"
)

const (
	dashboardFile  = "grafana/robotsgate.json"
	alertsFile     = "prometheus/alerts.yml"
	alertTestsFile = "prometheus/alerts_test.yml"
	operationsDoc  = "../docs/operations.md"
	runbookBase    = "https://github.com/robotsgate/robotsgate/blob/main/docs/operations.md#"
)

// metricName finds the metric names in a PromQL expression: robotsgate's
// own and the Go and process collectors' (label names and values, and
// Grafana's $__ variables, start otherwise).
var metricName = regexp.MustCompile(`\b(?:robotsgate|go|process)_[A-Za-z0-9_]*[A-Za-z0-9]`)

// TestMonitoringMetricNames: every metric name the dashboard's queries and
// variables and the alerts' expressions use is one a robotsgate started
// with [cluster] exports (read from its /metrics, a histogram as its
// _bucket, _sum and _count series): a metric renamed in the code leaves no
// panel empty and no alert silent.
func TestMonitoringMetricNames(t *testing.T) {
	t.Parallel()
	exported := exportedSeries(t)
	exprs := map[string][]string{dashboardFile: dashboardExprs(t), alertsFile: nil}
	for _, r := range alertRules(t) {
		exprs[alertsFile] = append(exprs[alertsFile], r.Expr)
	}
	for file, list := range exprs {
		if len(list) == 0 {
			t.Fatalf("%s: no expressions found", file)
		}
		for _, e := range list {
			names := metricName.FindAllString(e, -1)
			if len(names) == 0 && !strings.Contains(e, "label_values(") {
				t.Errorf("%s: %q names no metric", file, e)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("%s: %q uses %s, which robotsgate does not export", file, e, n)
				}
			}
		}
	}
}

// exportedSeries starts a robotsgate with [cluster] (its Redis need not
// answer: it is not dialled before it is used) and returns the names of
// the series its /metrics shows.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.TLS.StateDir = t.TempDir()
	cfg.Cluster.Redis, cfg.Cluster.Secret = "redis://127.0.0.1:1/0", strings.Repeat("s", 32)
	srv, err := proxy.NewServer(cfg, proxy.Options{Logger: slog.New(slog.DiscardHandler), AuditOut: io.Discard, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	series := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		switch name := f[2]; f[3] {
		case "histogram":
			series[name+"_bucket"], series[name+"_sum"], series[name+"_count"] = true, true, true
		case "summary":
			series[name], series[name+"_sum"], series[name+"_count"] = true, true, true
		default:
			series[name] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"robotsgate_requests_total", "robotsgate_cluster_up", "robotsgate_upstream_duration_seconds_bucket"} {
		if !series[want] {
			t.Fatalf("/metrics lacks %s: %d series read", want, len(series))
		}
	}
	return series
}

// dashboardExprs returns the dashboard's queries and its variables'
// queries, checking on the way that every panel and query reads the
// datasource variable, and that panel ids are unique.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name, Type, Definition string
				Query                  any
			}
		}
		Panels []struct {
			ID         int
			Type       string
			Title      string
			Datasource *struct{ Type, UID string }
			Targets    []struct {
				Expr       string
				Datasource *struct{ Type, UID string }
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	dsVar := false
	for _, v := range d.Templating.List {
		switch {
		case v.Name == "datasource":
			dsVar = v.Type == "datasource" && v.Query == "prometheus"
		case v.Type == "query":
			exprs = append(exprs, v.Definition)
		}
	}
	if !dsVar || d.UID == "" {
		t.Errorf("%s: want a uid and a variable datasource of type datasource, query prometheus", dashboardFile)
	}
	var ids []int
	for _, p := range d.Panels {
		if slices.Contains(ids, p.ID) {
			t.Errorf("%s: panel id %d twice", dashboardFile, p.ID)
		}
		ids = append(ids, p.ID)
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("%s: panel %q: want the datasource ${datasource} and a query", dashboardFile, p.Title)
		}
		for _, q := range p.Targets {
			if q.Datasource == nil || q.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q: query %q does not read ${datasource}", dashboardFile, p.Title, q.Expr)
			}
			exprs = append(exprs, q.Expr)
		}
	}
	return exprs
}

// rule is one alerting rule of deploy/prometheus/alerts.yml.
type rule struct {
	Alert       string
	Expr        string
	For         *string
	Labels      map[string]string
	Annotations map[string]string
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Groups []struct{ Rules []rule } }
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestAlertRules: every alert has a for, a severity of warning or
// critical, a summary and a description, a runbook_url that is a section
// of docs/operations.md, and a promtool test that fires it.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(string(doc))
	fired := firedInTests(t)
	rules := alertRules(t)
	if len(rules) == 0 {
		t.Fatalf("%s: no rules", alertsFile)
	}
	for _, r := range rules {
		if r.Alert == "" {
			t.Errorf("%s: %q is not an alert: this file holds alerts only", alertsFile, r.Expr)
			continue
		}
		if r.For == nil {
			t.Errorf("%s: %s has no for", alertsFile, r.Alert)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: %s: severity %q; want warning or critical", alertsFile, r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: %s: want a summary and a description", alertsFile, r.Alert)
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
		if !ok || !anchors[anchor] {
			t.Errorf("%s: %s: runbook_url %q; want %s and a heading of %s", alertsFile, r.Alert, r.Annotations["runbook_url"], runbookBase, operationsDoc)
		}
		if !fired[r.Alert] {
			t.Errorf("%s: no test fires %s", alertTestsFile, r.Alert)
		}
	}
}

// firedInTests returns the alerts that alerts_test.yml expects to fire.
func firedInTests(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	fired := map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			fired[a.Alertname] = fired[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	return fired
}

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, spaces as hyphens, punctuation but - and _ dropped.
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	for line := range strings.Lines(doc) {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}
