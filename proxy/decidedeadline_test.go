package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestDecideAPIDeadline: a /v1/decide call whose own time bound ends
// while it decides (one origin's robots.txt held past it) answers the
// caller, who is still there, truthfully: the held origin's URL
// unreachable, and a URL whose deciding the bound cut short overloaded,
// its reason naming the bound; never client-left.
func TestDecideAPIDeadline(t *testing.T) {
	t.Parallel()
	cached := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	held := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	hold := make(chan struct{})
	held.robotsHold.Store(&hold)
	t.Cleanup(func() { close(hold) }) // before the origin closes
	p := startProxyWith(t, loopbackConfig(), Options{decideTimeout: 500 * time.Millisecond})

	if _, out := postDecide(t, p, `{"urls":["`+cached.URL+`/"],"user_agent":"AnyBot"}`); fmt.Sprint(out["results"]) == "" {
		t.Fatalf("priming call: %v", out)
	}
	status, out := postDecide(t, p, `{"urls":["`+held.URL+`/x","`+cached.URL+`/a;b/%2F/c"],"user_agent":"AnyBot"}`)
	results, _ := out["results"].([]any)
	if status != 200 || len(results) != 2 {
		t.Fatalf("%d %v; want 200 and two results", status, out)
	}
	first, _ := results[0].(map[string]any)
	second, _ := results[1].(map[string]any)
	if first["decision"] != "unreachable" {
		t.Errorf("held origin: %v; want unreachable", first)
	}
	if second["decision"] != "overloaded" || !strings.Contains(fmt.Sprint(second["reason"]), "time bound (500ms)") {
		t.Errorf("cut short: %v; want overloaded, naming the time bound (500ms)", second)
	}
}
