package admin

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// TestStatusPageHeldCount renders /status's header in headless Chromium
// for the requests held now: one request, or several requests, never
// "1 requests".
func TestStatusPageHeldCount(t *testing.T) {
	t.Parallel()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	for _, tt := range []struct {
		held, backingOff int
		want             string
	}{
		{1, 1, "1 backing off, 1 request held"},
		{2, 0, "0 backing off, 2 requests held"},
	} {
		now := time.Now()
		body, err := json.Marshal(struct {
			Status
			Recent []map[string]any `json:"recent"`
		}{Status{Started: now, Now: now, Mode: "enforce", Held: tt.held, BackingOff: tt.backingOff}, []map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		srv := serveStatus(statusPage, body)
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", srv.URL+"/status").Output()
		cancel()
		srv.Close()
		if err != nil {
			t.Fatalf("%s --dump-dom: %v", browser, err)
		}
		if page := string(out); !strings.Contains(page, ">"+tt.want+"<") {
			t.Errorf("held %d: the header has no %q:\n%.1500s", tt.held, tt.want, page)
		}
	}
}
