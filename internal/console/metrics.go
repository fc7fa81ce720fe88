package console

import (
	"github.com/compactor-dev/compactor/operator"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactor-dev/compactor/pipeline"
)

// Collector exports what the console reads of the fleet for a central scraper: the
// figures no single worker has (a store nobody serves, the oldest job, which a store's
// worker may not read).
type Collector struct {
	view func() *operator.FleetView
}

// NewCollector exports the fleet view's figures (none while view returns nil).
func NewCollector(view func() *operator.FleetView) *Collector { return &Collector{view: view} }

var (
	descWorkers = prometheus.NewDesc("compactor_fleet_store_workers",
		"Workers that reported serving the store in the last 30 s (as compactor console reads COMPACTOR_WORKERS).", []string{"store"}, nil)
	descVersions = prometheus.NewDesc("compactor_fleet_worker_versions",
		"Workers by the version they run, across the fleet (more than one series: version skew).", []string{"version"}, nil)
	descPaused  = prometheus.NewDesc("compactor_fleet_store_paused", "1 while the store is paused (its pause record, as compactor console reads it).", []string{"store"}, nil)
	descPending = prometheus.NewDesc("compactor_fleet_queue_pending", "Jobs queued and not yet delivered, by store (as compactor console reads them).", []string{"store"}, nil)
	descDead    = prometheus.NewDesc("compactor_fleet_queue_dead_letters", "Dead letters kept, by store (as compactor console reads them).", []string{"store"}, nil)
)

// Describe sends the descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWorkers, descVersions, descPaused, descPending, descDead, pipeline.DescOldest} {
		ch <- d
	}
}

// Collect sends the figures of the last poll.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	v := c.view()
	if v == nil {
		return
	}
	snap := v.Snapshot()
	versions := map[string]map[string]bool{}
	for _, st := range snap.Stores {
		ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(len(st.Workers)), st.Store)
		paused := 0.0
		if st.Paused != nil {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, paused, st.Store)
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(st.Queue.Pending), st.Store)
		ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(st.Queue.DeadLetters), st.Store)
		age := 0.0
		if !st.Queue.Oldest.IsZero() {
			age = max(0, snap.At.Sub(st.Queue.Oldest).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(pipeline.DescOldest, prometheus.GaugeValue, age, st.Store)
		for _, b := range st.Workers {
			ver := b.Version
			if ver == "" {
				ver = "unknown"
			}
			if versions[ver] == nil {
				versions[ver] = map[string]bool{}
			}
			versions[ver][b.Worker] = true
		}
	}
	for ver, ws := range versions {
		ch <- prometheus.MustNewConstMetric(descVersions, prometheus.GaugeValue, float64(len(ws)), ver)
	}
}

// MetricNames are the names of the metrics compactor console exports.
func MetricNames() []string { return pipeline.DescribedNames(NewCollector(nil)) }

// View is the fleet view the console reads (nil until it is open).
func (c *Console) View() *operator.FleetView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view
}
