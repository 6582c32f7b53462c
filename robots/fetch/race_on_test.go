//go:build race

package fetch

// raceEnabled: the race detector is on, and everything runs slower.
const raceEnabled = true
