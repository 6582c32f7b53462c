package scrapy_test

import (
	"context"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// TestScrapyPackage installs the middleware as its README says, offline:
// pip into a virtualenv made with --system-site-packages (Debian's Scrapy,
// setuptools and wheel), from a copy of the files pyproject.toml names;
// then a crawl with that virtualenv's Python, nothing on PYTHONPATH, through
// a robotsgate that paces the site 1 s apart. The links of the start page
// are sent at once and held for their turns: the stats count each answer
// that says so (robotsgate/held), and its seconds (robotsgate/held_seconds,
// robotsgate/held_seconds_max), which are robotsgate's own
// (robotsgate_paced_wait_seconds).
func TestScrapyPackage(t *testing.T) {
	requireScrapy(t)
	requireVenv(t)
	dir := t.TempDir()
	venv := installPackage(t, dir)
	rg := startRobotsgate(t, dir, gateConfig{robotsRetryAfter: "1s", politeness: "crawl_delay = false\nmin_interval = \"1s\"\n"})
	links := []string{"/a", "/b", "/c", "/d"}
	site := newOrigin(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/robots.txt":
			w.Write([]byte("User-agent: *\nAllow: /\n"))
		case "/":
			w.Write([]byte(linksPage(links...)))
		default:
			w.Write([]byte("<html><body>page</body></html>"))
		}
	})

	out := runCrawlWith(t, interpreter{python: filepath.Join(venv, "bin", "python")}, dir, rg.proxy(), []string{site.URL + "/"})
	if out.Reason != "finished" {
		t.Errorf("crawl closed %q; want finished", out.Reason)
	}
	if !strings.HasPrefix(out.Module, venv+string(filepath.Separator)) {
		t.Errorf("robotsgate_scrapy imported from %s; want the virtualenv's (%s)", out.Module, venv)
	}
	out.wantSeen(t, site.URL+"/", site.URL+"/a", site.URL+"/b", site.URL+"/c", site.URL+"/d")
	// Four links, 1 s apart: whatever the machine's speed, the later ones
	// wait for their turns (the first start, "/", is never held).
	if len(out.Held) < 2 || len(out.Held) > len(links) {
		t.Fatalf("the callbacks saw X-Robots-Gate-Held on %q; want 2 to %d of the links", out.Held, len(links))
	}
	t.Logf("X-Robots-Gate-Held on the answers: %q", out.Held)
	sum := out.checkHeld(t)
	// Each header is robotsgate's own figure, to its millisecond.
	if own := testkit.Metric(t, "http://"+rg.addr+"/metrics", "robotsgate_paced_wait_seconds_sum"); math.Abs(own-sum) > 0.0005*float64(len(out.Held))+1e-9 {
		t.Errorf("robotsgate_paced_wait_seconds_sum = %v; the answers say %.3f", own, sum)
	}
}

// checkHeld checks the held stats against the X-Robots-Gate-Held values
// the callbacks saw (every answer robotsgate held reaches one in these
// crawls), and returns their sum: robotsgate/held counts them,
// robotsgate/held_seconds adds them up, robotsgate/held_seconds_max is
// the largest; none of the three is there when nothing was held.
func (c *crawl) checkHeld(t *testing.T) float64 {
	t.Helper()
	var sum, longest float64
	for _, v := range c.Held {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			t.Fatalf("X-Robots-Gate-Held %q: want seconds", v)
		}
		sum, longest = sum+s, max(longest, s)
	}
	if len(c.Held) == 0 {
		for _, key := range []string{"robotsgate/held", "robotsgate/held_seconds", "robotsgate/held_seconds_max"} {
			if v, ok := c.Stats[key]; ok {
				t.Errorf("stats[%q] = %v; want none, nothing was held", key, v)
			}
		}
		return 0
	}
	if n := c.stat("robotsgate/held"); n != len(c.Held) {
		t.Errorf("robotsgate/held = %d; the callbacks saw %d answers held", n, len(c.Held))
	}
	if got := c.statFloat("robotsgate/held_seconds"); math.Abs(got-sum) > 0.0005 {
		t.Errorf("robotsgate/held_seconds = %v; the answers say %.3f", got, sum)
	}
	if got := c.statFloat("robotsgate/held_seconds_max"); got != longest {
		t.Errorf("robotsgate/held_seconds_max = %v; want %.3f", got, longest)
	}
	return sum
}

// statFloat is the stats' number for key; 0 if none.
func (c *crawl) statFloat(key string) float64 {
	v, _ := c.Stats[key].(float64)
	return v
}

// requireVenv skips the test unless python can make a virtualenv with pip
// and build a package with setuptools offline (Debian: python3-venv,
// python3-setuptools, python3-wheel); with ROBOTSGATE_SCRAPY_REQUIRED set
// (CI sets it), it fails instead.
func requireVenv(t *testing.T) {
	t.Helper()
	probe, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(probe, python, "-c", "import ensurepip, setuptools, wheel").CombinedOutput(); err != nil {
		missing(t, err, out, "python3-venv", "python3-setuptools", "python3-wheel")
	}
}

// installPackage makes a virtualenv under dir and installs the package
// into it as the README says, offline; it returns the virtualenv's path.
// The package is built from a copy of its files: setuptools builds in the
// source tree (build/, *.egg-info), which stays clean.
func installPackage(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "robotsgate-scrapy")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pyproject.toml", "robotsgate_scrapy.py", "README.md"} {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	venv := filepath.Join(dir, "venv")
	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, cleanEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run(python, "-m", "venv", "--system-site-packages", venv)
	run(filepath.Join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", src)
	return venv
}
