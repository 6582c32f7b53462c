package memlimit

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"
	"testing/fstest"
)

func TestCgroup(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name      string
		fs        fstest.MapFS
		limit     int64
		from, err string
	}{
		{"no cgroup fs", fstest.MapFS{}, 0, "", ""},
		{"v2 in a container", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("268435456\n"),
		}, 256 << 20, "sys/fs/cgroup/memory.max", ""},
		{"v2 unlimited", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("max\n"),
		}, 0, "sys/fs/cgroup/memory.max", ""},
		{"v2 on a host: the process's own cgroup", fstest.MapFS{
			"proc/self/cgroup": file("0::/system.slice/robotsgate.service\n"),
			"sys/fs/cgroup/system.slice/robotsgate.service/memory.max": file("536870912\n"),
		}, 512 << 20, "sys/fs/cgroup/system.slice/robotsgate.service/memory.max", ""},
		{"v2 path not mounted: the root's", fstest.MapFS{
			"proc/self/cgroup":         file("0::/docker/abc\n"),
			"sys/fs/cgroup/memory.max": file("1073741824"),
		}, 1 << 30, "sys/fs/cgroup/memory.max", ""},
		{"v1", fstest.MapFS{
			"proc/self/cgroup": file("12:cpu,cpuacct:/x\n11:memory:/docker/abc\n0::/\n"),
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("134217728\n"),
		}, 128 << 20, "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", ""},
		{"v1 unlimited", fstest.MapFS{
			"proc/self/cgroup":                           file("11:memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, 0, "sys/fs/cgroup/memory/memory.limit_in_bytes", ""},
		{"garbage", fstest.MapFS{
			"sys/fs/cgroup/memory.max": file("lots\n"),
		}, 0, "sys/fs/cgroup/memory.max", `/sys/fs/cgroup/memory.max: not a byte count: "lots"`},
		{"negative", fstest.MapFS{
			"sys/fs/cgroup/memory.max": file("-1\n"),
		}, 0, "sys/fs/cgroup/memory.max", "not a byte count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit, from, err := Cgroup(tt.fs)
			if limit != tt.limit || from != tt.from {
				t.Errorf("Cgroup = %d from %q; want %d from %q", limit, from, tt.limit, tt.from)
			}
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("error %v; want one with %q", err, tt.err)
			}
		})
	}
}

// TestApply sets the runtime's limit, so it is not parallel and puts the
// limit back.
func TestApply(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	limited := fstest.MapFS{"sys/fs/cgroup/memory.max": &fstest.MapFile{Data: []byte("268435456\n")}}
	noEnv := func(string) string { return "" }

	debug.SetMemoryLimit(math.MaxInt64)
	s, err := Apply(limited, noEnv, 1<<30, "bound")
	if want := softOf(256 << 20); err != nil || s.Limit != want || debug.SetMemoryLimit(-1) != want || s.Source != "/sys/fs/cgroup/memory.max" {
		t.Errorf("Apply under a 256 MiB cgroup = %+v, %v, runtime %d; want %d from the cgroup", s, err, debug.SetMemoryLimit(-1), want)
	}
	if got := s.String(); got != "230 MiB from /sys/fs/cgroup/memory.max" {
		t.Errorf("String = %q", got)
	}

	// GOMEMLIMIT, even "off", is the operator's word: left as the runtime set it.
	for _, env := range []string{"100MiB", "off"} {
		debug.SetMemoryLimit(100 << 20)
		s, err = Apply(limited, func(k string) string {
			if k == "GOMEMLIMIT" {
				return env
			}
			return ""
		}, 1<<30, "bound")
		if err != nil || s.Source != "GOMEMLIMIT" || s.Limit != 100<<20 || debug.SetMemoryLimit(-1) != 100<<20 {
			t.Errorf("GOMEMLIMIT=%s: %+v, %v, runtime %d; want the runtime's limit left alone", env, s, err, debug.SetMemoryLimit(-1))
		}
	}

	// No container limit: the configured bound and the headroom.
	debug.SetMemoryLimit(math.MaxInt64)
	s, err = Apply(fstest.MapFS{}, noEnv, 1<<30, "robots.cache_max_bytes")
	if want := int64(1<<30 + Headroom); err != nil || s.Limit != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("no cgroup limit, a 1 GiB bound: %+v, %v, runtime %d; want %d", s, err, debug.SetMemoryLimit(-1), want)
	}
	if got := s.String(); got != "1280 MiB from robots.cache_max_bytes + 256 MiB headroom (no container limit)" {
		t.Errorf("String = %q", got)
	}
	// No limit anywhere, and no bound: nothing set.
	debug.SetMemoryLimit(math.MaxInt64)
	if s, err = Apply(fstest.MapFS{}, noEnv, 0, ""); err != nil || s.Source != "" || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("no cgroup limit: %+v, %v, runtime %d; want nothing set", s, err, debug.SetMemoryLimit(-1))
	}
	// A limit file that cannot be read: an error, nothing set.
	bad := fstest.MapFS{"sys/fs/cgroup/memory.max": &fstest.MapFile{Data: []byte("x")}}
	if s, err = Apply(bad, noEnv, 1<<30, "bound"); err == nil || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("unreadable limit: %+v, %v; want an error and nothing set", s, err)
	}
}

func softOf(n int64) int64 { return int64(float64(n) * Share) }
