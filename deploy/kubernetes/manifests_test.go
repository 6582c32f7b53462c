// Package kubernetes holds the manifests an operator applies
// (kubectl apply -k deploy/kubernetes); its test checks that they hang
// together and that the config they carry is one robotsgate accepts.
package kubernetes

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// doc is any manifest, read generically.
type doc map[string]any

// at walks a manifest by keys and list indexes ("spec.template.spec").
func (d doc) at(path string) any {
	var v any = map[string]any(d)
	for _, k := range strings.Split(path, ".") {
		switch m := v.(type) {
		case map[string]any:
			v = m[k]
		case doc:
			v = m[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(m) {
				return nil
			}
			v = m[i]
		default:
			return nil
		}
	}
	return v
}

func (d doc) str(path string) string { s, _ := d.at(path).(string); return s }

// asMap is a mapping read into a doc or a map.
func asMap(v any) map[string]any {
	switch m := v.(type) {
	case doc:
		return m
	case map[string]any:
		return m
	}
	return nil
}

// readManifests reads every manifest of the kustomization, by kind.
func readManifests(t *testing.T) map[string][]doc {
	t.Helper()
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	byKind := map[string][]doc{}
	for _, name := range append(k.Resources, "secret.example.yaml") {
		f, err := os.Open(name)
		if err != nil {
			t.Fatalf("kustomization names %s: %v", name, err)
		}
		dec := yaml.NewDecoder(f)
		for {
			var d doc
			if err := dec.Decode(&d); err != nil {
				if err.Error() != "EOF" {
					t.Fatalf("%s: %v", name, err)
				}
				break
			}
			byKind[d.str("kind")] = append(byKind[d.str("kind")], d)
		}
		f.Close()
	}
	return byKind
}

// TestManifests: the Deployment's probes ask /healthz on the port the
// config listens on, its memory limit is robots.cache_max_bytes plus the
// headroom robotsgate sets its soft limit with, the Service, the
// PodDisruptionBudget and the NetworkPolicy select its pods, the Secrets'
// keys are the files the config names, and the config compiles.
func TestManifests(t *testing.T) {
	m := readManifests(t)
	for _, kind := range []string{"Namespace", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "Secret"} {
		if len(m[kind]) == 0 {
			t.Fatalf("no %s", kind)
		}
	}
	dep := m["Deployment"][0]
	labels := asMap(dep.at("spec.template.metadata.labels"))
	if len(labels) == 0 {
		t.Fatal("the Deployment's pods have no labels")
	}
	selects := func(what string, sel any) {
		sm := asMap(sel)
		if len(sm) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range sm {
			if labels[k] != v {
				t.Errorf("%s selects %s=%v; the pods are labelled %v", what, k, v, labels)
			}
		}
	}
	selects("the Deployment", dep.at("spec.selector.matchLabels"))
	selects("the Service", m["Service"][0].at("spec.selector"))
	selects("the PodDisruptionBudget", m["PodDisruptionBudget"][0].at("spec.selector.matchLabels"))
	selects("the NetworkPolicy", m["NetworkPolicy"][0].at("spec.podSelector.matchLabels"))

	c := doc(asMap(dep.at("spec.template.spec.containers.0")))
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if c.str(probe+".httpGet.path") != "/healthz" || c.str(probe+".httpGet.port") != c.str("ports.0.name") {
			t.Errorf("%s = %v; want /healthz on the proxy port", probe, c.at(probe))
		}
	}

	// The config, with the Secrets' files where the pod mounts them.
	text, _ := asMap(m["ConfigMap"][0].at("data"))["config.toml"].(string)
	dir := t.TempDir()
	files := map[string]string{}
	for _, s := range m["Secret"] {
		for key := range asMap(s.at("stringData")) {
			files[s.str("metadata.name")+"/"+key] = filepath.Join(dir, s.str("metadata.name")+"-"+key)
		}
	}
	mounts := map[string]string{} // mount path -> secret name
	for _, v := range dep.at("spec.template.spec.volumes").([]any) {
		vd := doc(asMap(v))
		if name := vd.str("secret.secretName"); name != "" {
			for _, vm := range c.at("volumeMounts").([]any) {
				if vmd := doc(asMap(vm)); vmd.str("name") == vd.str("name") {
					mounts[vmd.str("mountPath")] = name
				}
			}
		}
	}
	for mount, secret := range mounts {
		for key, local := range files {
			if name, file, _ := strings.Cut(key, "/"); name == secret {
				text = strings.ReplaceAll(text, mount+"/"+file, local)
				os.WriteFile(local, []byte("0123456789abcdef0123456789abcdef0123456789\n"), 0o400)
			}
		}
	}
	if strings.Contains(text, "/etc/robotsgate/") {
		t.Errorf("the config names files no Secret provides:\n%s", text)
	}
	cfg, err := config.Parse("configmap.yaml config.toml", []byte(text))
	if err == nil {
		_, err = policy.Compile(cfg, cluster.CheckConfig) // as serve checks it
	}
	if err != nil {
		t.Fatalf("the ConfigMap's config: %v", err)
	}
	if !strings.HasPrefix(cfg.Listen, "0.0.0.0:") || !strings.HasSuffix(cfg.Listen, ":"+intString(c.at("ports.0.containerPort"))) {
		t.Errorf("listen %q; want every address, on the container port %v", cfg.Listen, c.at("ports.0.containerPort"))
	}
	limit := c.str("resources.limits.memory")
	want := cfg.Robots.CacheMaxBytes + 256<<20
	if got := mebibytes(t, limit) << 20; got != want {
		t.Errorf("memory limit %s; want robots.cache_max_bytes + 256Mi = %dMi", limit, want>>20)
	}
	if mode, _ := dep.at("spec.template.spec.volumes.1.secret.defaultMode").(int); mode != 0o400 {
		t.Errorf("the CA Secret's defaultMode %#o; want 0400", mode)
	}
}

func intString(v any) string {
	n, _ := v.(int)
	return strconv.Itoa(n)
}

// mebibytes reads a Kubernetes quantity in Mi.
func mebibytes(t *testing.T, q string) int64 {
	t.Helper()
	n, ok := strings.CutSuffix(q, "Mi")
	v, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil {
		t.Fatalf("memory limit %q: want a number of Mi", q)
	}
	return v
}
