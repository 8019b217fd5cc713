package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// ruleThresholdsPath holds the alerts' thresholds with their shipped values
// (chartcheck checks each is in its rule's expression).
const ruleThresholdsPath = "helm/gpulink-exporter/files/rule-thresholds.yaml"

// dashboardThresholds are the dashboard panels that colour a value the
// alerts judge: each must turn red where its alert fires, at the alert's
// threshold (issue 37: the probe panels turned red at 0.7 while the alert
// fired at 0.5). field is the override's field name ("" for the panel's
// defaults); below says the value is bad below the threshold (red first),
// else above it (red last).
var dashboardThresholds = []struct {
	file, panel, field, alert string
	below                     bool
}{
	{"gpulink-fleet.json", "Host copies (PCIe): lowest probe bandwidth / expected", "Value", "GPUProbeHostBandwidthLow", true},
	{"gpulink-fleet.json", "Peer copies (NVLink): lowest probe bandwidth / expected", "Value", "GPUProbePeerBandwidthLow", true},
	{"gpulink-fleet.json", "Lowest probe bandwidth / expected in the fleet, by probe", "", "GPUProbeHostBandwidthLow", true},
	{"gpulink-links.json", "Probe bandwidth / expected (worst per GPU and probe)", "", "GPUProbeHostBandwidthLow", true},
	{"gpulink-node.json", "Measured / expected per GPU", "", "GPUProbeHostBandwidthLow", true},
	{"gpulink-fleet.json", "Node-to-node probes per target, failing first", "Value #C", "NodeProbeBandwidthLow", true},
	{"gpulink-fleet.json", "Most throttled GPUs (hardware and thermal reasons)", "Value", "GPUThrottled", false},
	{"gpulink-node.json", "Share of time throttled, by reason (dashboard range)", "", "GPUThrottled", false},
}

type thresholdStep struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

type dashboardPanel struct {
	Title       string           `json:"title"`
	Panels      []dashboardPanel `json:"panels"`
	FieldConfig struct {
		Defaults struct {
			Thresholds struct {
				Steps []thresholdStep `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				Options any `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
}

// steps is the threshold steps the panel gives field ("" its defaults), nil
// for none.
func (p dashboardPanel) steps(field string) []thresholdStep {
	if field == "" {
		return p.FieldConfig.Defaults.Thresholds.Steps
	}
	for _, o := range p.FieldConfig.Overrides {
		if o.Matcher.Options != field {
			continue
		}
		for _, prop := range o.Properties {
			if prop.ID != "thresholds" {
				continue
			}
			var th struct {
				Steps []thresholdStep `json:"steps"`
			}
			if json.Unmarshal(prop.Value, &th) == nil {
				return th.Steps
			}
		}
	}
	return nil
}

func findPanel(ps []dashboardPanel, title string) (dashboardPanel, bool) {
	for _, p := range ps {
		if p.Title == title {
			return p, true
		}
		if q, ok := findPanel(p.Panels, title); ok {
			return q, true
		}
	}
	return dashboardPanel{}, false
}

// TestDashboardThresholdsFollowRules: a panel that colours what an alert
// judges turns red exactly at the alert's threshold, so the dashboard and
// the alert never disagree on what is bad.
func TestDashboardThresholdsFollowRules(t *testing.T) {
	b, err := os.ReadFile(ruleThresholdsPath)
	if err != nil {
		t.Fatal(err)
	}
	var thresholds map[string]struct {
		Default float64 `yaml:"default"`
	}
	if err := yaml.Unmarshal(b, &thresholds); err != nil {
		t.Fatalf("%s: %v", ruleThresholdsPath, err)
	}
	for _, c := range dashboardThresholds {
		th, ok := thresholds[c.alert]
		if !ok {
			t.Errorf("%s: no threshold for %s", ruleThresholdsPath, c.alert)
			continue
		}
		data, err := os.ReadFile(filepath.Join(dashboardsDir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []dashboardPanel `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		p, ok := findPanel(d.Panels, c.panel)
		if !ok {
			t.Errorf("%s: no panel %q", c.file, c.panel)
			continue
		}
		steps := p.steps(c.field)
		// Red below the threshold: the first step is red and the next
		// starts at the threshold. Red above it: the last step is red
		// and starts at the threshold.
		var red *float64
		switch {
		case len(steps) < 2:
		case c.below && steps[0].Color == "red":
			red = steps[1].Value
		case !c.below && steps[len(steps)-1].Color == "red":
			red = steps[len(steps)-1].Value
		}
		if red == nil || *red != th.Default {
			t.Errorf("%s: panel %q (field %q) turns red at %v; %s fires at %v: colour it red from the alert's threshold (steps %+v)",
				c.file, c.panel, c.field, deref(red), c.alert, th.Default, steps)
		}
	}
}

func deref(v *float64) any {
	if v == nil {
		return "no red step"
	}
	return *v
}
