package source

import (
	"errors"
	"os"
	"testing"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/usage"
)

func TestTDMRep(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/usage/tdmrep.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseTDMRep(body)
	if err != nil {
		t.Fatal(err)
	}
	if f.Len() != 3 {
		t.Errorf("%d entries kept; want 3 (a tdm-reservation of 2 and an entry with no location are skipped)", f.Len())
	}
	tests := []struct {
		path, want, policy string
	}{
		{"/articles/1", "ai-train=refused(tdmrep.json: / tdm-reservation=1) ai-input=refused(tdmrep.json: / tdm-reservation=1)", "https://publisher.example/policies/tdm-policy.json"},
		{"/open-access/paper.html", "ai-train=allowed(tdmrep.json: /open-access/* tdm-reservation=0) ai-input=allowed(tdmrep.json: /open-access/* tdm-reservation=0)", ""},
		{"/open-access/paper.pdf", "ai-train=refused(tdmrep.json: /open-access/*.pdf$ tdm-reservation=1) ai-input=refused(tdmrep.json: /open-access/*.pdf$ tdm-reservation=1)", "https://publisher.example/policies/pdf.json"},
		{"/open-access/paper.pdf?download=1", "ai-train=allowed(tdmrep.json: /open-access/* tdm-reservation=0) ai-input=allowed(tdmrep.json: /open-access/* tdm-reservation=0)", ""},
		{"/broken", "ai-train=refused(tdmrep.json: / tdm-reservation=1) ai-input=refused(tdmrep.json: / tdm-reservation=1)", "https://publisher.example/policies/tdm-policy.json"},
	}
	for _, tt := range tests {
		if got := usageString(f.Usage(tt.path)); got != tt.want {
			t.Errorf("Usage(%q) = %s; want %s", tt.path, got, tt.want)
		}
		if got := f.Policy(tt.path); got != tt.policy {
			t.Errorf("Policy(%q) = %q; want %q", tt.path, got, tt.policy)
		}
	}
	// Locations are escaped and normalised as robots.txt patterns are.
	g, err := ParseTDMRep([]byte(`[{"location": "/caf%c3%a9/%7euser", "tdm-reservation": 1}]`), robots.WithNormalization())
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Usage(robots.Normalize("/caf%C3%A9/~user/x"))[usage.AITrain].State; got != usage.Refused {
		t.Errorf("a normalised location: %v; want refused", got)
	}
	for _, bad := range []string{``, `{}`, `[1, 2]`, `"x"`, `[{"location": "/"}`, "\xff"} {
		if _, err := ParseTDMRep([]byte(bad)); !errors.Is(err, ErrTDMRep) {
			t.Errorf("ParseTDMRep(%q) = %v; want ErrTDMRep", bad, err)
		}
	}
	var none *TDMRep
	if got := usageString(none.Usage("/")); got != "" || none.Policy("/") != "" || none.Len() != 0 {
		t.Errorf("a nil TDMRep states %s", got)
	}
}

func TestTDMRepEverywhere(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ file, want string }{
		{`[{"location": "/", "tdm-reservation": 1}]`, "ai-train=refused(tdmrep.json: / tdm-reservation=1) ai-input=refused(tdmrep.json: / tdm-reservation=1)"},
		{`[{"location": "/news/*", "tdm-reservation": 1}, {"location": "*", "tdm-reservation": 1}]`, "ai-train=refused(tdmrep.json: * tdm-reservation=1) ai-input=refused(tdmrep.json: * tdm-reservation=1)"},
		{`[{"location": "/", "tdm-reservation": 1}, {"location": "/open/*", "tdm-reservation": 0}]`, ""},
		{`[{"location": "/news/*", "tdm-reservation": 1}]`, ""},
		{`[]`, ""},
	} {
		f, err := ParseTDMRep([]byte(tt.file))
		if err != nil {
			t.Fatal(err)
		}
		if got := usageString(f.UsageEverywhere()); got != tt.want {
			t.Errorf("%s: UsageEverywhere = %s; want %s", tt.file, got, tt.want)
		}
	}
}

// FuzzParseTDMRep reads any bytes as a tdmrep.json file: refused with
// ErrTDMRep, or a file whose every answer names its entry and refuses or
// grants ai-train and ai-input together.
func FuzzParseTDMRep(f *testing.F) {
	f.Add(readUsageSeed(f, "tdmrep.json"), "/open-access/paper.pdf")
	f.Add([]byte(`[{"location":"/*a*a*a$","tdm-reservation":"1"}]`), "/aaaa")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		tr, err := ParseTDMRep(body, robots.WithNormalization())
		if err != nil {
			if !errors.Is(err, ErrTDMRep) {
				t.Fatalf("ParseTDMRep: %v; want ErrTDMRep", err)
			}
			return
		}
		u, ok := tr.UsageWithin(robots.Normalize("/"+path), robots.NewBudget(1<<20))
		if !ok {
			return
		}
		checkStatements(t, "TDMRep.Usage", u, "tdmrep.json: ")
		if u[usage.AITrain] != u[usage.AIInput] || u[usage.Search].State != usage.Unstated {
			t.Fatalf("TDMRep.Usage(%q) = %s", path, usageString(u))
		}
		// What is reserved on every path is reserved on this one.
		if all := tr.UsageEverywhere(); all[usage.AITrain].State == usage.Refused && u[usage.AITrain].State != usage.Refused {
			t.Fatalf("TDMRep.UsageEverywhere = %s, but Usage(%q) = %s", usageString(all), path, usageString(u))
		}
	})
}
