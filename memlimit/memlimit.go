// Package memlimit gives the Go runtime a soft memory limit from the
// container's, or, with none, from what the process is configured to
// hold: the collector then works harder as the heap nears it, instead of
// letting it grow to twice the live data (GOGC=100) and the kernel
// killing the process, or the machine swapping.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// Share is the part of the container's limit given to the Go heap and
// runtime: the rest is for what the runtime does not count (the binary,
// thread stacks outside the heap, the kernel's page cache of the process).
const Share = 0.9

// Setting says what Apply did.
type Setting struct {
	Limit  int64  // the soft limit in force, bytes; math.MaxInt64 when none
	Source string // "GOMEMLIMIT", the cgroup file it came from, or "" when none
}

// Headroom is what the process is given beyond its configured bound when
// there is no container limit: connections, buffers, goroutines and the
// runtime, which the bound does not count.
const Headroom = 256 << 20

// Apply sets the runtime's soft memory limit to Share of the memory limit
// of the process's cgroup (v2, or v1), read under fsys (os.DirFS("/") in
// production) unless GOMEMLIMIT is set (to a size or to "off"), in which
// case the runtime has already applied it and it is left alone. With
// neither, and bound > 0 (what the process is configured to hold, such as
// robots.cache_max_bytes), the limit is bound plus Headroom, source named
// boundName. No cgroup limit is not an error; a limit file that cannot be
// read or parsed is, and nothing is set.
func Apply(fsys fs.FS, getenv func(string) string, bound int64, boundName string) (Setting, error) {
	if getenv("GOMEMLIMIT") != "" {
		return Setting{Limit: debug.SetMemoryLimit(-1), Source: "GOMEMLIMIT"}, nil
	}
	limit, file, err := Cgroup(fsys)
	if err != nil {
		return Setting{Limit: debug.SetMemoryLimit(-1)}, err
	}
	if limit <= 0 {
		if bound <= 0 {
			return Setting{Limit: debug.SetMemoryLimit(-1)}, nil
		}
		soft := bound + Headroom
		debug.SetMemoryLimit(soft)
		return Setting{Limit: soft, Source: fmt.Sprintf("%s + %d MiB headroom (no container limit)", boundName, Headroom>>20)}, nil
	}
	soft := int64(float64(limit) * Share)
	debug.SetMemoryLimit(soft)
	return Setting{Limit: soft, Source: "/" + file}, nil
}

// unlimitedV1 is at least what cgroup v1 reports for no limit
// (PAGE_COUNTER_MAX pages, rounded: 9223372036854771712 with 4 KiB pages).
const unlimitedV1 = math.MaxInt64 / 2

// Cgroup returns the memory limit of the process's cgroup, in bytes, and
// the file it was read from (a path in fsys); 0 when there is none.
// /proc/self/cgroup names the cgroup: its v2 memory.max, or else its v1
// memory.limit_in_bytes, is read, falling back to the mount's root (a
// container that sees only its own cgroup).
func Cgroup(fsys fs.FS) (int64, string, error) {
	v2, v1 := "/", "/"
	if b, err := fs.ReadFile(fsys, "proc/self/cgroup"); err == nil {
		v2, v1 = ownCgroups(b)
	}
	candidates := []string{
		path.Join("sys/fs/cgroup", v2, "memory.max"),
		"sys/fs/cgroup/memory.max",
		path.Join("sys/fs/cgroup/memory", v1, "memory.limit_in_bytes"),
		"sys/fs/cgroup/memory/memory.limit_in_bytes",
	}
	for _, name := range candidates {
		b, err := fs.ReadFile(fsys, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, name, fmt.Errorf("memory limit: %w", err)
		}
		n, err := parseLimit(b)
		if err != nil {
			return 0, name, fmt.Errorf("memory limit: /%s: %w", name, err)
		}
		return n, name, nil
	}
	return 0, "", nil
}

// ownCgroups returns the process's cgroup paths, from /proc/self/cgroup:
// the v2 one ("0::/path") and the v1 memory controller's ("N:memory:/path"
// or with other controllers beside it); "/" for each not named.
func ownCgroups(b []byte) (v2, v1 string) {
	v2, v1 = "/", "/"
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2 = p
		case hasController(controllers, "memory"):
			v1 = p
		}
	}
	return v2, v1
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// parseLimit reads a cgroup memory limit: bytes, or "max" (v2) or a value
// near the largest (v1) for none, which is 0.
func parseLimit(b []byte) (int64, error) {
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a byte count: %q", s)
	}
	if n >= unlimitedV1 {
		return 0, nil
	}
	return n, nil
}

// String describes s for the startup log.
func (s Setting) String() string {
	if s.Source == "" {
		return "none (no GOMEMLIMIT, no cgroup memory limit)"
	}
	return fmt.Sprintf("%d MiB from %s", s.Limit>>20, s.Source)
}
