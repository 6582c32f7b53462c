package identity

import (
	"net/url"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// wellKnownDirectory is the path a key directory is published at by
// draft-meunier-http-message-signatures-directory.
const wellKnownDirectory = "/.well-known/http-message-signatures-directory"

// CheckConfig checks c's [identity] into pb (policy.Compile calls it): an
// https URL for the signature agent (sent in a structured field:
// printable ASCII only) whose authority the key directory can be signed
// for (AgentAuthority), and a validity from 10 s to a day. An https URL
// with no path (or "/") is warned of, not refused: sites fetch it as
// written, and a site's address redirecting to the directory does not
// work, but a site may serve its directory at "/".
func CheckConfig(c *config.Config, pb *config.Problems) {
	ic := &c.Identity
	if _, err := ParseForm(ic.SignatureAgentForm); err != nil {
		pb.Addf("identity.signature_agent_form", "%v", err)
	}
	if ic.SignatureAgent == "" {
		if ic.KeyFile != "" {
			pb.Addf("identity.key_file", "set without identity.signature_agent: nothing is signed")
		}
		if ic.SignatureAgentForm == "string" {
			pb.Addf("identity.signature_agent_form", "set without identity.signature_agent: nothing is signed")
		}
		return
	}
	u, err := url.Parse(ic.SignatureAgent)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" || strings.ContainsAny(ic.SignatureAgent, `"\#`):
		pb.Addf("identity.signature_agent", "%q is not an https URL without a fragment or quotes (the URL your key directory is served at, as sites fetch it: https://bot.example/.well-known/http-message-signatures-directory)", ic.SignatureAgent)
	case strings.ContainsFunc(ic.SignatureAgent, func(r rune) bool { return r < 0x21 || r > 0x7e }):
		pb.Addf("identity.signature_agent", "%q: only printable ASCII without spaces can be sent (percent-encode the rest)", ic.SignatureAgent)
	default:
		if _, err := AgentAuthority(ic.SignatureAgent); err != nil {
			pb.Addf("identity.signature_agent", "%q: %v", ic.SignatureAgent, err)
		} else if (u.Path == "" || u.Path == "/") && u.RawQuery == "" {
			// Valid, and right for a site that serves its directory at
			// "/"; more often a site's address where the directory's goes.
			pb.Warnf("identity.signature_agent", "%q has no path: sites fetch the key directory at exactly this URL and follow no redirect; unless %s itself answers the directory (check: curl -sS --max-redirs 0 %s), write %q",
				ic.SignatureAgent, u.Scheme+"://"+u.Host+"/", ic.SignatureAgent, u.Scheme+"://"+u.Host+wellKnownDirectory)
		}
	}
	if ic.Validity < 10*time.Second || ic.Validity > 24*time.Hour {
		pb.Addf("identity.validity", "%v: want from 10s to 24h", ic.Validity)
	}
}
