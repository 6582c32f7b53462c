package main

import (
	"fmt"
	"io"
	"runtime"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// runVersion prints the version and the Go release it was built with.
func runVersion(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	_, err := fmt.Fprintf(stdout, "robotsgate %s %s\n", version, runtime.Version())
	return err
}
