package robots

import (
	"testing"
)

func TestLicenseLines(t *testing.T) {
	t.Parallel()
	body := "License: https://publisher.example/license.xml\nUser-agent: *\nDisallow: /x\nlicense : https://cdn.example/l.xml\nLicenses: https://not-one\n"
	for _, r := range []*Robots{Parse([]byte(body)), Parse([]byte(body), WithNormalization())} {
		cold, hot := tiers(t, r)
		for _, f := range []*Robots{r, cold, hot} {
			got := f.Licenses()
			if len(got) != 2 || got[0] != "https://publisher.example/license.xml" || got[1] != "https://cdn.example/l.xml" {
				t.Errorf("Licenses() = %q; want the two License lines", got)
			}
		}
	}
	if got := Parse([]byte("User-agent: *\n")).Licenses(); got != nil {
		t.Errorf("Licenses() of a file with none = %q", got)
	}
}
