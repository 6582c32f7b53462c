//go:build race

package cluster

// raceEnabled: the race detector is on (and sync.Pool drops what it is
// given now and then).
const raceEnabled = true
