package proxy

import (
	"slices"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// A Pending is a key of the config whose value differs from the one the
// server started with and which a reload cannot apply, or applies only
// in part: what it sets waits for a restart.
type Pending struct {
	Key string // as config.Changed names it: "tls.http2"
	// Now says what part of it a reload applies; "" when none does.
	Now string
}

// restartRule is a key, or the keys of a table ("tls."), that apply at
// a restart only (the first rule of restartRules that names a key is
// its rule).
type restartRule struct {
	key  string // a key, or a table's prefix ending in "."
	now  string // what a reload applies of it; "": nothing
	warn string // the line a reload logs while it differs
}

// restartRules are the keys a reload cannot apply whole: what the
// server builds at start from them (the listener and its http.Server,
// the MITM CA, the caches and their fetchers, the fleet's client, the
// evidence store, the fleet's budget counter) is kept until a restart.
func restartRules() []restartRule {
	const listener = "; the listener's own connections keep the old value until a restart"
	return []restartRule{
		{key: "listen", warn: "listen changed: restart to apply"},
		{key: "tls.state_dir", warn: "tls.state_dir changed: restart to apply (the CA, the robots.txt copies, the budget and the evidence store stay in the old directory until then; an [identity] key without key_file is read from the new one at this reload)"},
		{key: "tls.", warn: "[tls] changed: restart to apply"},
		{key: "robots.cache_max_bytes", warn: "robots.cache_max_bytes changed: restart to apply"},
		{key: "robots.max_fetches", warn: "robots.max_fetches changed: restart to apply"},
		{key: "robots.", warn: "[robots] changed: restart to apply (the robots.txt and usage-file caches and their fetchers are built at start)"},
		{key: "cluster.", warn: "[cluster] changed: restart to apply"},
		{key: "evidence.", warn: evidenceWarning},
		// audit.file only when it turns evidence on or off,
		// payments.key_prefix only with [cluster] (restartNeeded).
		{key: "audit.file", now: "the audit log moved to it", warn: evidenceWarning},
		{key: "payments.key_prefix", warn: "payments.key_prefix changed: restart to apply (the fleet's budget counter is opened at start)"},
		{key: "limits.max_connections", now: "connections kept to origins",
			warn: "limits.max_connections changed: connections kept to origins are bounded by it now; the limit on client connections needs a restart"},
		{key: "limits.", now: "tunnels opened from now on, and connections to origins",
			warn: "[limits] changed: tunnels opened from now on, and connections to origins, use it" + listener},
	}
}

// evidenceWarning is the line of a change to [evidence], or to
// audit.file that turns it on or off.
const evidenceWarning = "[evidence] changed: restart to apply (the store of copies and the audit log's checkpoints are set up at start; audit.file set or cleared turns evidence on or off)"

// RestartNeeded returns the keys of next that differ from the config the
// server started with and that a reload cannot apply, or applies only in
// part (Pending.Now says which part): each needs a restart. A change a
// restart needs stays in the list at each reload until the file is set
// back or the server restarted.
func (s *Server) RestartNeeded(next *config.Config) []Pending {
	pending, _ := restartNeeded(&s.started, next)
	return pending
}

// restartNeeded is RestartNeeded from started, with the line each key
// logs.
func restartNeeded(started, next *config.Config) ([]Pending, []string) {
	var pending []Pending
	var warns []string
	for _, key := range config.Changed(started, next) {
		switch key {
		case "audit.file":
			if started.EvidenceOn() == next.EvidenceOn() {
				continue // the audit log moves, and evidence with it
			}
		case "payments.key_prefix":
			if !started.Cluster.Enabled() {
				continue // no fleet counter: the prefix names nothing
			}
		}
		for _, r := range restartRules() {
			if key != r.key && !(strings.HasSuffix(r.key, ".") && strings.HasPrefix(key, r.key)) {
				continue
			}
			now := r.now
			if key == "tls.state_dir" && next.Identity.SignatureAgent != "" && next.Identity.KeyFile == "" {
				now = "the [identity] key is read from the new directory"
			}
			pending = append(pending, Pending{Key: key, Now: now})
			if !slices.Contains(warns, r.warn) {
				warns = append(warns, r.warn)
			}
			break
		}
	}
	return pending, warns
}

// warnRestart logs each part of cfg that differs from the config the
// server started with and applies only at a restart (RestartNeeded), with
// what waits for it.
func (s *Server) warnRestart(cfg *config.Config) {
	_, warns := restartNeeded(&s.started, cfg)
	for _, w := range warns {
		s.log.Warn(w)
	}
}
