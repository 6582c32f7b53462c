package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// hostile are names an attacker controls (a requested host, a robots.txt
// rule, a User-Agent token) written to break out of the page.
var hostile = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(2)>`,
	`</title></rect></svg><script>alert(3)</script>`,
	`javascript:alert(4)`,
}

func TestWriteHTML(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	s := &Summary{}
	if err := s.ReadFile("testdata/audit.jsonl"); err != nil {
		t.Fatal(err)
	}
	for i, h := range hostile {
		s.Add(&audit.Record{Time: audit.Time(at.Add(time.Duration(i) * time.Hour)), Decision: policy.ActionDenied, Origin: h, Token: h, Rule: h, URL: h})
		s.Add(&audit.Record{Time: audit.Time(at.Add(time.Duration(i) * time.Hour)), Decision: policy.ActionAllowed, Origin: h, Charged: "USD 0.1"})
	}
	var out bytes.Buffer
	if err := s.WriteHTML(&out); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	for _, h := range hostile[:3] {
		if strings.Contains(page, h) {
			t.Errorf("the page holds %q unescaped", h)
		}
	}
	if want := "&lt;script&gt;alert(1)&lt;/script&gt;"; !strings.Contains(page, want) {
		t.Errorf("the page has no %q", want)
	}

	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	var texts []string
	for n := range doc.Descendants() {
		switch n.Type {
		case html.ElementNode:
			count[n.Data]++
			for _, a := range n.Attr {
				if strings.HasPrefix(a.Key, "on") || a.Key == "src" || a.Key == "href" {
					t.Errorf("<%s> has attribute %s=%q", n.Data, a.Key, a.Val)
				}
			}
		case html.TextNode:
			texts = append(texts, n.Data)
		}
	}
	if count["script"] != 0 || count["img"] != 0 || count["link"] != 0 {
		t.Errorf("elements %v; want no script, img or link", count)
	}
	// Decisions, origins by decision, origins' answers, refused URLs,
	// spent by origin, tokens, and disallow, allow and usage rules, and
	// usage refusals by source.
	if count["svg"] != 1 || count["rect"] < 10 || count["table"] != 10 {
		t.Errorf("elements %v; want one svg with bars and a legend, ten tables", count)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{
		"time (UTC), one bar per hour", "records", // axis labels
		"disallowed", "would-block", hostile[0], // legend and tables, as text
		"11-23 08:00",                        // an x tick
		"2026-11-23 08:00 UTC: disallowed 2", // a bar's title
		"Origins by decision", "Origins' answers", "Disallow rules", "Allow rules", "Usage rules",
		"disallow: /drafts", "allow: /", "2xx", "429",
		"Refused URLs", "http://site.example/private/y", "Spent by origin", "USD 0.40", "What reached the sites",
		"never sent: robotsgate answered for the site", // the footer, per class
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the page's text has no %q", want)
		}
	}
}
