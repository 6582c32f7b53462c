package cluster

import (
	"testing"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestConfigAgrees: the config's shortest secret and default op_timeout
// are the client's own (config keeps copies, so as not to link the Redis
// client).
func TestConfigAgrees(t *testing.T) {
	t.Parallel()
	if config.MinSecretBytes != MinSecretBytes {
		t.Errorf("config.MinSecretBytes = %d; want cluster.MinSecretBytes, %d", config.MinSecretBytes, MinSecretBytes)
	}
	if got := config.Default().Cluster.OpTimeout; got != DefaultOpTimeout {
		t.Errorf("config.Default().Cluster.OpTimeout = %v; want cluster.DefaultOpTimeout, %v", got, DefaultOpTimeout)
	}
}
