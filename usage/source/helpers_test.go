package source

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/usage"
)

// usageString spells u out for a test: "ai-train=refused(statement) …".
func usageString(u usage.Usage) string {
	var b strings.Builder
	for p := range usage.NumPurposes {
		if u[p].State == usage.Unstated {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.String() + "=" + u[p].State.String() + "(" + u[p].Statement + ")")
	}
	return b.String()
}

// readUsageSeed returns the file testdata/usage/name, for a fuzz seed.
func readUsageSeed(f *testing.F, name string) []byte {
	f.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "usage", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// checkStatements fails t when a verdict of u states something with no
// statement, or a statement that does not start with prefix.
func checkStatements(t *testing.T, what string, u usage.Usage, prefix string) {
	t.Helper()
	for p, v := range u {
		if v.State != usage.Unstated && !strings.HasPrefix(v.Statement, prefix) || v.State == usage.Unstated && v.Statement != "" {
			t.Fatalf("%s[%s] = %+v; want a statement starting %q", what, usage.Purpose(p), v, prefix)
		}
	}
}
