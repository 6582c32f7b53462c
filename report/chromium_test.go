package report

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// layoutProbe, put into a copy of the page, measures it as laid out and
// writes what it found into the DOM, which --dump-dom prints: whether the
// page is wider than the window, and whether the refused-URL table fits
// its box (no scrolling sideways).
const layoutProbe = `<script>
addEventListener("load", () => {
  const box = document.querySelector("table.refused").parentElement;
  const out = document.createElement("pre");
  out.id = "layout";
  out.textContent = "page-overflow=" + (document.documentElement.scrollWidth > innerWidth) +
    " refused-overflow=" + (box.scrollWidth > box.clientWidth) +
    " refused-rows=" + document.querySelectorAll("table.refused tbody tr").length +
    " footer=" + document.querySelectorAll("dl.classes-def dt").length;
  document.body.append(out);
});
</script>`

// TestHTMLInChromium: the page as headless Chromium lays it out, on a
// desktop window and a phone's: the page never scrolls sideways, and the
// refused-URL table fits the desktop window whole, a URL of 2,000 bytes
// with no break in it included.
func TestHTMLInChromium(t *testing.T) {
	t.Parallel()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	s := &Summary{}
	if err := s.ReadFile("testdata/proxy.jsonl"); err != nil {
		t.Fatal(err)
	}
	long := "https://shop.example:8081/" + strings.Repeat("x", 2000)
	s.Add(&audit.Record{Time: audit.Time(time.Date(2026, 11, 24, 9, 3, 0, 0, time.UTC)), Decision: policy.ActionUsageRefused,
		Origin: "http://shop.example:8081", Method: "GET", URL: long, Rule: "response header x-robots-tag: " + strings.Repeat("noai,", 40)})
	var page bytes.Buffer
	if err := s.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	probed := strings.Replace(page.String(), "</body>", layoutProbe+"</body>", 1)
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, []byte(probed), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		window        string
		refusedScroll bool // the table may scroll within its box
	}{
		{"1400,1000", false},
		{"390,844", true}, // a phone: the table scrolls in its box, the page does not
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server",
			"--user-data-dir="+t.TempDir(), "--window-size="+tt.window, "--virtual-time-budget=5000", "--dump-dom", "file://"+file).Output()
		cancel()
		if err != nil {
			t.Fatalf("%s --dump-dom: %v", browser, err)
		}
		m := regexp.MustCompile(`<pre id="layout">([^<]*)</pre>`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("%s: the probe did not run:\n%.2000s", tt.window, out)
		}
		got := string(m[1])
		// The 10 refusals of proxy.jsonl and the long one, and their two
		// origins' heading rows.
		want := "page-overflow=false refused-overflow=false refused-rows=13 footer=3"
		if tt.refusedScroll {
			want = "page-overflow=false refused-overflow=true refused-rows=13 footer=3"
		}
		if got != want {
			t.Errorf("window %s: %s; want %s", tt.window, got, want)
		}
	}
}
