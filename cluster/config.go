package cluster

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// CheckConfig checks c's [cluster] into pb: exactly one of redis (a Redis
// URL), sentinels (with master) and nodes, their addresses, and secret and
// secret_file (exactly one with a Redis, neither without, and a secret
// config.ClusterConfig.ReadSecret accepts). No message shows the secret
// or the password. It is the check policy.Compile is given by the
// commands that run a fleet (docs/operations.md, "Running several
// instances"): policy does not link the Redis client.
func CheckConfig(c *config.Config, pb *config.Problems) {
	cc := &c.Cluster
	named := 0
	for _, set := range []bool{cc.Redis != "", len(cc.Sentinels) > 0, len(cc.Nodes) > 0} {
		if set {
			named++
		}
	}
	switch {
	case named > 1:
		key := "cluster.nodes" // the second of the three set
		if cc.Redis != "" && len(cc.Sentinels) > 0 {
			key = "cluster.sentinels"
		}
		pb.Addf(key, "redis, sentinels and nodes are exclusive: name the fleet's Redis one way")
	case cc.Redis != "":
		if err := ParseURL(cc.Redis); err != nil {
			pb.Addf("cluster.redis", "%q is not a Redis URL (redis://host:6379/0): %v", redactURL(cc.Redis), err)
		}
		if cc.Password != "" || cc.PasswordFile != "" {
			pb.Addf("cluster.password", "set with cluster.redis: put the password in the URL (redis://:password@host:6379/0)")
		}
	case len(cc.Sentinels) > 0 && cc.Master == "":
		pb.Addf("cluster.master", "required with cluster.sentinels: the name the Sentinels know the primary by (\"mymaster\")")
	case len(cc.Sentinels) == 0 && cc.Master != "":
		pb.Addf("cluster.master", "set without cluster.sentinels")
	case named == 0 && (cc.Password != "" || cc.PasswordFile != ""):
		pb.Addf("cluster.password", "set without cluster.sentinels or cluster.nodes")
	case cc.Enabled():
		if _, err := cc.ReadPassword(); err != nil {
			key := "cluster.password"
			if cc.PasswordFile != "" {
				key = "cluster.password_file"
			}
			pb.Addf(key, "%v", err)
		}
	}
	if strings.ContainsAny(cc.KeyPrefix, "{}") {
		pb.Addf("cluster.key_prefix", "%q holds { or }: a Redis Cluster hash tag is robotsgate's to place (an origin's keys must share a slot)", cc.KeyPrefix)
	}
	if cc.SentinelAuth && len(cc.Sentinels) == 0 {
		pb.Addf("cluster.sentinel_auth", "set without cluster.sentinels")
	}
	if cc.OpTimeout < 10*time.Millisecond || cc.OpTimeout > 10*time.Second {
		pb.Addf("cluster.op_timeout", "%v: want from 10ms to 10s (a few round trips to Redis: connecting, AUTH, the call)", cc.OpTimeout)
	}
	checkAddrs(pb, "cluster.sentinels", cc.Sentinels)
	checkAddrs(pb, "cluster.nodes", cc.Nodes)
	key := "cluster.secret"
	if cc.SecretFile != "" && cc.Secret == "" {
		key = "cluster.secret_file"
	}
	switch {
	case !cc.Enabled() && (cc.Secret != "" || cc.SecretFile != ""):
		pb.Addf(key, "set without a [cluster] Redis (redis, sentinels or nodes): there is no fleet to share it with")
	case !cc.Enabled():
	case cc.Secret == "" && cc.SecretFile == "":
		pb.Addf(key, "required with a [cluster] Redis: a secret of at least %d bytes (secret), or a file holding one (secret_file), the same on every instance", config.MinSecretBytes)
	default:
		if _, err := cc.ReadSecret(); err != nil {
			pb.Addf(key, "%v", err)
		}
	}
}

// checkAddrs reports the entries of addrs that are not host:port.
func checkAddrs(pb *config.Problems, key string, addrs []string) {
	for i, a := range addrs {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			pb.Addf(fmt.Sprintf("%s[%d]", key, i), "%q is not host:port", a)
		}
	}
}

// redactURL hides a URL's password, for messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}
