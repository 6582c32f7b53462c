// Package redistest runs a real redis-server for tests, on a free loopback
// port, as net/http/httptest runs real HTTP servers.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a redis-server process on a loopback port.
type Server struct {
	Addr string // 127.0.0.1:port
	t    testing.TB
	cmd  *exec.Cmd
	dir  string
	args []string // more options
	conf string   // a config file to start with (a Sentinel's), "" for none
	// Password, when set, is sent (AUTH) before each command of Do and
	// DoAll.
	Password string
}

// Start runs redis-server from PATH, persisting nothing, and stops it when
// the test ends. Without redis-server on PATH the test is skipped, saying
// how to install it. args are more redis-server options ("--replicaof",
// "127.0.0.1", "6379").
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return startAuth(t, "", args...)
}

// startAuth is Start for a server that requires password.
func startAuth(t testing.TB, password string, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH: install the Debian package redis-server to run this test")
	}
	s := &Server{Addr: freeAddr(t), t: t, dir: t.TempDir(), args: args, Password: password}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

func (s *Server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	var args []string
	if s.conf != "" {
		args = append(args, s.conf, "--sentinel")
	}
	args = append(args, "--port", port, "--bind", "127.0.0.1", "--dir", s.dir, "--protected-mode", "yes")
	if s.conf == "" {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	s.cmd = exec.Command("redis-server", append(args, s.args...)...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s.Ping() == nil {
			return
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("redis-server on %s did not answer PING within 10 s", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ping sends PING and reads the answer.
func (s *Server) Ping() error {
	_, err := s.Do("PING")
	return err
}

// Do sends one command and returns the first line of the answer (an
// error for an error reply): enough for tests to look at keys.
func (s *Server) Do(args ...string) (string, error) {
	c, r, err := s.send(args)
	if err != nil {
		return "", err
	}
	defer c.Close()
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "-") {
		return "", fmt.Errorf("redis: %s", line[1:])
	}
	return line, nil
}

// send dials the server and sends one command, within 2 s; the caller
// reads the answer and closes the connection.
func (s *Server) send(args []string) (net.Conn, *bufio.Reader, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if s.Password != "" {
		b.Reset()
		for _, cmd := range [][]string{{"AUTH", s.Password}, args} {
			fmt.Fprintf(&b, "*%d\r\n", len(cmd))
			for _, a := range cmd {
				fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
			}
		}
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		c.Close()
		return nil, nil, err
	}
	r := bufio.NewReader(c)
	if s.Password != "" {
		if _, err := readReply(r); err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return c, r, nil
}

// Stop kills the server (as a crash would) and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the server's process (SIGSTOP) without closing its
// connections or its port: it hangs, as a server that answers nothing.
func (s *Server) Pause() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume lets a paused server run on (SIGCONT).
func (s *Server) Resume() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Sentinel is a primary, a replica of it and a Redis Sentinel watching
// them under the master name Master, as a Sentinel deployment runs.
type Sentinel struct {
	Primary, Replica *Server
	Sentinel         *Server // the Sentinel: its Addr is what clients are given
	Master           string
}

// StartSentinel runs a primary, a replica and a Sentinel (redis-server
// --sentinel) that fails the primary over after 1 s without an answer,
// and stops them when the test ends. It returns once the replica has
// synced and the Sentinel knows both.
func StartSentinel(t testing.TB) *Sentinel { t.Helper(); return StartSentinelWith(t, "") }

// StartSentinelWith is StartSentinel with password required by the
// primary, the replica and the Sentinel alike (as the Bitnami chart sets
// them up by default); "" for none.
func StartSentinelWith(t testing.TB, password string) *Sentinel {
	t.Helper()
	// DEBUG SLEEP (a pause, for a test) is allowed from loopback.
	auth := []string{"--enable-debug-command", "local"}
	if password != "" {
		auth = append(auth, "--requirepass", password, "--masterauth", password)
	}
	primary := startAuth(t, password, auth...)
	_, pport, _ := net.SplitHostPort(primary.Addr)
	replica := startAuth(t, password, append([]string{"--replicaof", "127.0.0.1", pport}, auth...)...)
	st := &Sentinel{Primary: primary, Replica: replica, Master: "mymaster"}
	st.Sentinel = &Server{Addr: freeAddr(t), t: t, dir: t.TempDir(), Password: password}
	st.Sentinel.conf = st.Sentinel.dir + "/sentinel.conf"
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\n",
		st.Master, pport, st.Master, st.Master, st.Master)
	if password != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\nrequirepass %s\n", st.Master, password, password)
	}
	if err := os.WriteFile(st.Sentinel.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	st.Sentinel.start()
	t.Cleanup(st.Sentinel.Stop)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, _ := replica.Info("replication")
		known, _ := st.Sentinel.Do("SENTINEL", "REPLICAS", st.Master)
		if strings.Contains(info, "master_link_status:up") && known != "*0" && known != "" {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not sync, or the Sentinel did not find it, within 15 s: %q, %q", info, known)
		}
	}
}

// PrimaryAddr returns the address the Sentinel names as the primary now.
func (st *Sentinel) PrimaryAddr() (string, error) {
	out, err := st.Sentinel.DoAll("SENTINEL", "GET-MASTER-ADDR-BY-NAME", st.Master)
	if err != nil {
		return "", err
	}
	if len(out) != 2 {
		return "", fmt.Errorf("sentinel answered %q", out)
	}
	return net.JoinHostPort(out[0], out[1]), nil
}

// Info returns the INFO section of the server, whole.
func (s *Server) Info(section string) (string, error) {
	out, err := s.DoAll("INFO", section)
	return strings.Join(out, "\n"), err
}

// DoAll sends one command and returns the answer's lines of data: a bulk
// string's text, an array's bulk strings, a status line without its "+".
func (s *Server) DoAll(args ...string) ([]string, error) {
	c, r, err := s.send(args)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return readReply(r)
}

// readReply reads one RESP reply as lines of data (nested arrays
// flattened; a bulk string's text split at its line breaks).
func readReply(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("redis: an empty reply")
	}
	switch line[0] {
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case '+', ':':
		return []string{line[1:]}, nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		lines := strings.Split(strings.TrimRight(string(buf[:n]), "\r\n"), "\n")
		for i := range lines {
			lines[i] = strings.TrimRight(lines[i], "\r")
		}
		return lines, nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		var out []string
		for range max(n, 0) {
			part, err := readReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, part...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}

// Cluster is a Redis Cluster of primaries on loopback ports, its 16384
// slots spread evenly over them.
type Cluster struct {
	Nodes []*Server
}

// StartCluster runs n redis-server processes in cluster mode, assigns
// them the slots, joins them, and returns once the cluster says it is
// ok; they stop when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range n {
		c.Nodes = append(c.Nodes, Start(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", "nodes-"+strconv.Itoa(len(c.Nodes))+".conf"))
	}
	const slots = 16384
	for i, s := range c.Nodes {
		from, to := i*slots/n, (i+1)*slots/n-1
		if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(from), strconv.Itoa(to)); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr, err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(s.Addr)
			if _, err := c.Nodes[0].Do("CLUSTER", "MEET", host, port); err != nil {
				t.Fatalf("CLUSTER MEET %s: %v", s.Addr, err)
			}
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ok := true
		for _, s := range c.Nodes {
			info, _ := s.DoAll("CLUSTER", "INFO")
			if !slices.Contains(info, "cluster_state:ok") || !slices.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				ok = false
			}
		}
		if ok {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster of %d nodes was not ok within 20 s", n)
		}
	}
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, s := range c.Nodes {
		out = append(out, s.Addr)
	}
	return out
}
