package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// keptBodies is an evidence.Keeper that remembers what it is handed.
type keptBodies struct {
	mu     sync.Mutex
	copies []evidence.Copy
	bodies [][]byte
}

func (k *keptBodies) Keep(c evidence.Copy, body []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.copies, k.bodies = append(k.copies, c), append(k.bodies, bytes.Clone(body))
}

// of returns the bodies kept of url.
func (k *keptBodies) of(url string) [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out [][]byte
	for i, c := range k.copies {
		if c.URL == url {
			out = append(out, k.bodies[i])
		}
	}
	return out
}

// copiesOf returns an audit record's copies.
func copiesOf(t *testing.T, rec map[string]any) []audit.Copy {
	t.Helper()
	b, err := json.Marshal(rec["copies"])
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Copy
	if err := json.Unmarshal(b, &out); err != nil || out == nil {
		t.Fatalf("copies %s: %v; want an array", b, err)
	}
	return out
}

// hexSum is the hex SHA-256 of body.
func hexSum(body string) string {
	s := sha256.Sum256([]byte(body))
	return hex.EncodeToString(s[:])
}

// fetchedAt is the fetch time of the robots.txt p holds for origin u, as
// the audit log writes it.
func fetchedAt(t *testing.T, p *testProxy, u string) string {
	t.Helper()
	a, held := p.srv.cache.Peek(mustOrigin(t, u))
	if !held || a.Entry == nil {
		t.Fatalf("no robots.txt held for %s: %+v", u, a)
	}
	b, _ := audit.Time(a.Entry.FetchedAt).MarshalText()
	return string(b)
}

// TestAuditNamesCopies: a blocked request's audit record names the copy
// of robots.txt that decided it, by the SHA-256 of the body the origin
// served and its fetch time; a request declaring a purpose names, after
// it, the usage files the sources read (its RSL licence, then its
// tdmrep.json), each by the SHA-256 of its body; a [[sites]] rule and an
// unreachable robots.txt name none.
func TestAuditNamesCopies(t *testing.T) {
	t.Parallel()
	const (
		license = `<rsl><content url="/"><license><permits type="usage">all</permits></license></content></rsl>`
		tdmrep  = `[{"location":"/reserved/*","tdm-reservation":1}]`
	)
	o := newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/license.xml":
			io.WriteString(w, license)
		case "/.well-known/tdmrep.json":
			io.WriteString(w, tdmrep)
		default:
			io.WriteString(w, "page\n")
		}
	})
	robotsTxt := "User-agent: *\nDisallow: /private\nLicense: " + o.URL + "/license.xml\n"
	o.robots.Store(robotsTxt)
	down := newTestOrigin(t, "", nil)
	down.robotsStatus.Store(503)
	cfg := loopbackConfig()
	cfg.Audit.LogAllowed = true
	cfg.Sites = []config.SiteRule{{Host: "localhost", Policy: "deny", Reason: "asked us to stop"}}
	var k keptBodies
	p := startProxyWith(t, cfg, Options{keep: &k})
	c := p.client()

	if resp, _ := get(t, c, o.URL+"/private/x"); resp.StatusCode != 403 {
		t.Fatalf("/private/x: %d; want 403", resp.StatusCode)
	}
	robots := audit.Copy{URL: o.URL + "/robots.txt", SHA256: hexSum(robotsTxt), Status: 200}
	rec := p.lastAudit(t)
	cs := copiesOf(t, rec)
	at := fetchedAt(t, p, o.URL)
	if len(cs) != 1 || cs[0].URL != robots.URL || cs[0].SHA256 != robots.SHA256 || cs[0].Status != 200 || mustText(t, cs[0].Fetched) != at {
		t.Errorf("blocked: copies %+v; want robots.txt's, sha256 %s, fetched %s", cs, robots.SHA256, at)
	}

	resp, _ := get(t, c, o.URL+"/page", policy.PurposeHeader, "ai-train")
	if resp.StatusCode != 200 {
		t.Fatalf("/page for ai-train: %d; want 200", resp.StatusCode)
	}
	cs = copiesOf(t, p.lastAudit(t))
	want := []audit.Copy{robots, {URL: o.URL + "/license.xml", SHA256: hexSum(license), Status: 200}, {URL: o.URL + "/.well-known/tdmrep.json", SHA256: hexSum(tdmrep), Status: 200}}
	if len(cs) != len(want) {
		t.Fatalf("with a purpose: copies %+v; want %d: robots.txt, the licence, tdmrep.json", cs, len(want))
	}
	for i := range want {
		if cs[i].URL != want[i].URL || cs[i].SHA256 != want[i].SHA256 || cs[i].Status != 200 || mustText(t, cs[i].Fetched) == "" {
			t.Errorf("with a purpose: copy %d = %+v; want %+v", i, cs[i], want[i])
		}
	}
	// A body is handed to the Keeper after the requests waiting for it
	// are let go, so that keeping never delays a decision: wait for it.
	for _, w := range want {
		testkit.Eventually(t, "the body of "+w.URL+" kept", func() bool { return len(k.of(w.URL)) > 0 })
		if got := k.of(w.URL); len(got) != 1 || hexSum(string(got[0])) != w.SHA256 {
			t.Errorf("kept %d bodies of %s; want its body once", len(got), w.URL)
		}
	}

	_, port, _ := net.SplitHostPort(strings.TrimPrefix(o.URL, "http://"))
	for u, decision := range map[string]policy.Action{"http://localhost:" + port + "/x": policy.ActionDenied, down.URL + "/x": policy.ActionUnreachable} {
		get(t, c, u)
		rec := p.lastAudit(t)
		if cs, ok := rec["copies"].([]any); !ok || len(cs) != 0 || rec["decision"] != decision.String() {
			t.Errorf("%s: %v, copies = %#v; want %v, []", u, rec["decision"], rec["copies"], decision)
		}
	}
}

// mustText is t as the audit log writes it.
func mustText(t *testing.T, at audit.Time) string {
	t.Helper()
	b, err := at.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFleetCopies: an instance that took robots.txt from the fleet's
// Redis, without fetching it, names the same copy as the instance that
// fetched it (the same SHA-256, the same fetch time), and its Keeper was
// handed the body, so that it can keep every copy its own records name.
func TestFleetCopies(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	o := newTestOrigin(t, testRobots, nil)
	keepers := []*keptBodies{{}, {}}
	fleet := startFleetWith(t, r, 2, nil, func(i int) Options { return Options{keep: keepers[i]} })
	var recs []map[string]any
	for _, p := range fleet {
		if resp, _ := get(t, p.client(), o.URL+"/private/x"); resp.StatusCode != 403 {
			t.Fatalf("/private/x: %d; want 403", resp.StatusCode)
		}
		recs = append(recs, p.lastAudit(t))
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Fatalf("robots.txt fetched %d times; want once, the second instance reading Redis", n)
	}
	a, b := copiesOf(t, recs[0]), copiesOf(t, recs[1])
	if len(a) != 1 || len(b) != 1 || a[0].SHA256 != hexSum(testRobots) || a[0].URL != b[0].URL || a[0].SHA256 != b[0].SHA256 || mustText(t, a[0].Fetched) != mustText(t, b[0].Fetched) {
		t.Errorf("copies: the fetcher's %+v, the other's %+v; want the same, sha256 %s", a, b, hexSum(testRobots))
	}
	for i, k := range keepers {
		testkit.Eventually(t, "robots.txt kept", func() bool { return len(k.of(o.URL+"/robots.txt")) > 0 })
		if got := k.of(o.URL + "/robots.txt"); len(got) != 1 || string(got[0]) != testRobots {
			t.Errorf("instance %d kept %q; want the body once", i, got)
		}
	}
}
