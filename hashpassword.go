package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"
)

// bcryptCost is the cost of hashes made by hash-password.
const bcryptCost = 12

// runHashPassword reads one password line on stdin (without echo on a
// terminal) and prints its bcrypt hash, for [[auth.users]] password_hash.
func runHashPassword(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("hash-password", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: hash-password reads the password on stdin, not as an argument", errUsage)
	}
	var pw []byte
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(stderr, "password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return fmt.Errorf("read password: %w", err)
		}
		pw = b
	} else {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read password: %w", err)
		}
		pw = []byte(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"))
	}
	switch {
	case len(pw) == 0:
		return fmt.Errorf("%w: empty password", errUsage)
	case len(pw) > 72:
		return fmt.Errorf("%w: password longer than 72 bytes (bcrypt reads no further)", errUsage)
	}
	hash, err := bcrypt.GenerateFromPassword(pw, bcryptCost)
	if err != nil {
		return fmt.Errorf("hash password: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", hash)
	return err
}
