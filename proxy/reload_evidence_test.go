package proxy

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReloadEvidenceChanged: the evidence store and the audit log's
// signing are set up at start, so a reload that changes [evidence], or
// turns it on or off by setting or clearing audit.file, says that it
// needs a restart rather than seeming to apply.
func TestReloadEvidenceChanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := loopbackConfig()
	cfg.TLS.StateDir = dir
	p, _ := startWithLookup(t, cfg, loopbackLookup)
	next := *cfg
	if err := p.srv.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if log := p.log.String(); strings.Contains(log, "[evidence]") {
		t.Errorf("a reload changing nothing logged:\n%s", log)
	}
	next.Audit.File = filepath.Join(dir, "audit.log") // evidence on from here, were it applied
	if err := p.srv.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if log := p.log.String(); !strings.Contains(log, "[evidence] changed: restart to apply") {
		t.Errorf("a reload setting audit.file (evidence on) logged:\n%s\nwant [evidence] changed: restart to apply", log)
	}
	next.Audit.File = ""
	next.Evidence.CheckpointInterval = time.Hour
	if err := p.srv.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if log := p.log.String(); strings.Count(log, "[evidence] changed: restart to apply") != 2 {
		t.Errorf("a reload changing evidence.checkpoint_interval logged:\n%s\nwant [evidence] changed: restart to apply", log)
	}
}
