package main

import (
	"fmt"
	"io"
)

// runValidate checks a config file as the proxy would, and says so.
func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", stderr)
	path := fs.String("config", "", "config `FILE` to check; none: the built-in defaults")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: validate: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if _, err := loadConfig(*path, nil); err != nil {
		return err
	}
	name := *path
	if name == "" {
		name = "built-in defaults"
	}
	_, err := fmt.Fprintf(stdout, "%s: ok\n", name)
	return err
}
