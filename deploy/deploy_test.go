// Package deploy_test checks the deployment files against the binary: every metric that
// the Grafana dashboard and the Prometheus rules name is one compactor exports (a worker's
// /metrics, or compactor console's), and the configuration files use no flag that does
// not exist or is deprecated.
package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/console"
	"github.com/compactor-dev/compactor/pipeline"
)

// exported are the metric names compactor exports.
func exported() map[string]bool {
	out := map[string]bool{}
	for _, n := range append(pipeline.MetricNames(), console.MetricNames()...) {
		out[n] = true
	}
	return out
}

// promQL's functions, aggregations, keywords and the series Prometheus makes itself.
var promWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`sum min max avg count stddev stdvar topk bottomk quantile count_values group
		rate irate increase delta idelta deriv predict_linear histogram_quantile absent absent_over_time present_over_time
		avg_over_time min_over_time max_over_time sum_over_time count_over_time last_over_time quantile_over_time
		abs ceil floor round clamp clamp_min clamp_max time timestamp vector scalar label_replace label_join sort sort_desc changes resets
		by without on ignoring group_left group_right and or unless bool offset inf nan up`) {
		promWords[w] = true
	}
}

var (
	labelMatchers = regexp.MustCompile(`\{[^}]*\}`)
	grouping      = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ranges        = regexp.MustCompile(`\[[^\]]*\]`)
	strs          = regexp.MustCompile(`"[^"]*"`)
	words         = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
)

// metricsIn are the metric names a PromQL expression selects.
func metricsIn(expr string) []string {
	e := strs.ReplaceAllString(expr, " ")
	e = labelMatchers.ReplaceAllString(e, " ")
	e = grouping.ReplaceAllString(e, " ")
	e = ranges.ReplaceAllString(e, " ")
	var out []string
	for _, w := range words.FindAllString(e, -1) {
		if !promWords[w] {
			out = append(out, w)
		}
	}
	return out
}

// missing are the metrics of exprs that compactor does not export (a histogram's
// _bucket, _sum and _count series are its own).
func missing(exprs map[string]string, have map[string]bool) []string {
	var out []string
	for where, expr := range exprs {
		for _, m := range metricsIn(expr) {
			base := m
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suf); ok && have[b] {
					base = b
				}
			}
			if !have[base] {
				out = append(out, where+": "+m)
			}
		}
	}
	slices.Sort(out)
	return out
}

// alertRules reads the alert rules: each rule's expression, and each rule must have a
// name, an expression, a severity and a summary.
func alertRules(t *testing.T) map[string]string {
	b, err := os.ReadFile("observability/prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	var rule string
	fields := map[string]map[string]bool{}
	for line := range strings.Lines(string(b)) {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		if name, ok := strings.CutPrefix(l, "- alert: "); ok {
			rule = name
			fields[rule] = map[string]bool{}
			continue
		}
		if rule == "" {
			continue
		}
		key, val, _ := strings.Cut(l, ":")
		fields[rule][key] = true
		if key == "expr" {
			exprs["prometheus-alerts.yml "+rule] = strings.TrimSpace(val)
		}
	}
	for rule, f := range fields {
		for _, k := range []string{"expr", "for", "severity", "summary", "description"} {
			if !f[k] {
				t.Errorf("alert %s has no %s", rule, k)
			}
		}
	}
	return exprs
}

// dashboard reads the Grafana dashboard's queries.
func dashboard(t *testing.T) map[string]string {
	b, err := os.ReadFile("observability/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	exprs := map[string]string{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			exprs["grafana-dashboard.json "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	return exprs
}

// Every metric the dashboard and the alert rules name is one compactor exports, and each
// thing an operator is to be told of has a rule.
func TestObservabilityNamesExportedMetrics(t *testing.T) {
	have := exported()
	rules, panels := alertRules(t), dashboard(t)
	for _, m := range missing(rules, have) {
		t.Errorf("no such metric: %s", m)
	}
	for _, m := range missing(panels, have) {
		t.Errorf("no such metric: %s", m)
	}
	named := map[string]bool{}
	for _, e := range []map[string]string{rules, panels} {
		for _, expr := range e {
			for _, m := range metricsIn(expr) {
				named[m] = true
			}
		}
	}
	if len(rules) < 10 || len(panels) < 15 || len(named) < 15 {
		t.Errorf("%d rules, %d queries, %d metrics read: the files were not read as meant", len(rules), len(panels), len(named))
	}
	// The list: queue age, dead letters, no worker for a store, version skew, spend
	// near the limit, /readyz false, zero-wait misses; and a Pi release compactor does not
	// know (docs/compatibility.md).
	for _, want := range []string{"compactor_queue_oldest_age_seconds", "compactor_dead_letters_total", "compactor_fleet_store_workers",
		"compactor_build_info", "compactor_spend_window_tokens", "compactor_ready", "compactor_prepared_hook_total", "compactor_pi_version_unknown_total"} {
		found := false
		for _, expr := range rules {
			found = found || slices.Contains(metricsIn(expr), want)
		}
		if !found {
			t.Errorf("no alert rule reads %s", want)
		}
	}
}

// The check finds a metric that does not exist (a misspelling, one renamed), wherever it
// stands in an expression, and passes those that do.
func TestMissingMetricIsFound(t *testing.T) {
	have := exported()
	for expr, want := range map[string]string{
		`max by (store) (compactor_queue_oldest_age_secs) > 900`:                                "compactor_queue_oldest_age_secs",
		`histogram_quantile(0.95, sum by (le) (rate(compactor_job_seconds_bucket[5m])))`:        "compactor_job_seconds_bucket",
		`sum(rate(compactor_jobs_total{outcome="failed"}[5m])) / sum(rate(compactor_jobz[5m]))`: "compactor_jobz",
		`count(count by (version) (compactor_build_info)) > 1 and on (store) nats_varz_cpu`:     "nats_varz_cpu",
	} {
		got := missing(map[string]string{"x": expr}, have)
		if len(got) != 1 || got[0] != "x: "+want {
			t.Errorf("%s: missing %v, want %s", expr, got, want)
		}
	}
	if got := missing(map[string]string{"x": `histogram_quantile(0.5, sum by (le) (rate(compactor_job_duration_seconds_bucket[5m])))`}, have); len(got) != 0 {
		t.Errorf("an exported histogram reported missing: %v", got)
	}
}
