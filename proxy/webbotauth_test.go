package proxy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity/identitytest"
)

// TestSignatureAgentForms: robotsgate sends Signature-Agent in
// [identity]'s signature_agent_form, or in the form of the [[sites]] rule
// that matches, and each request's signature covers the component of the
// form sent; its own robots.txt fetch keeps [identity]'s. The signed
// requests, as the origin received them, verify with Cloudflare's
// published verifiers: the dictionary form with http-message-sig 0.3.0's
// verifySignature, the string form with web-bot-auth 0.1.3's verify (which
// rejects the dictionary form: why the string form is there); neither
// verifies a request whose Signature-Agent was changed.
func TestSignatureAgentForms(t *testing.T) {
	t.Parallel()
	var got received
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		got.record(r)
		io.WriteString(w, "page\n")
	})
	_, port, _ := strings.Cut(strings.TrimPrefix(o.URL, "http://"), ":")
	cfg := loopbackConfig()
	cfg.Identity.SignatureAgent, cfg.Identity.SignatureAgentForm = testAgent, "string"
	cfg.Sites = []config.SiteRule{{Host: "modern.example", Policy: "robots", SignatureAgentForm: "dictionary"}}
	p := startProxyWith(t, cfg, Options{LookupNetIP: loopbackLookup})
	resp, body := get(t, http.DefaultClient, p.url.String()+"/.well-known/http-message-signatures-directory")
	if resp.StatusCode != 200 {
		t.Fatalf("directory: %d", resp.StatusCode)
	}
	dir := []byte(body)

	want := map[string]string{"legacy.example": "string", "modern.example": "dictionary"}
	for host := range want {
		if resp, _ := get(t, p.client(), "http://"+host+":"+port+"/page"); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", host, resp.StatusCode)
		}
	}
	var pages []*http.Request
	for _, r := range got.all() {
		host, _, _ := strings.Cut(r.Host, ":")
		sig, err := identitytest.Verify(r, dir, time.Now())
		if err != nil {
			t.Errorf("%s%s: %v\n%v", r.Host, r.URL.Path, err, r.Header)
			continue
		}
		field := r.Header.Get("Signature-Agent")
		if sig.Form != want[host] || sig.Agent != testAgent || (sig.Form == "string") != (field == `"`+testAgent+`"`) {
			t.Errorf("%s: form %s, Signature-Agent %s; want the %s form", host, sig.Form, field, want[host])
		}
		pages = append(pages, r)
	}
	if len(pages) != 2 {
		t.Fatalf("the origin saw %d signed pages; want 2", len(pages))
	}
	if n := o.count("/robots.txt"); n != 2 {
		t.Errorf("robots.txt fetched %d times; want 2 (one per host)", n)
	}

	// And a forgery, each page naming another agent: no verifier takes it.
	for _, r := range pages[:2] {
		f := r.Clone(r.Context())
		f.Header.Set("Signature-Agent", strings.Replace(f.Header.Get("Signature-Agent"), "bot.example", "impostor.example", 1))
		pages = append(pages, f)
	}
	results := verifyWithNPM(t, dir, pages)
	t.Logf("Cloudflare's verifiers: %+v", results)
	for _, res := range results[2:] {
		if res.HTTPMessageSig.OK || res.WebBotAuth.OK {
			t.Errorf("a forged Signature-Agent verified: %+v", res)
		}
	}
	pages = pages[:2]
	for i, r := range pages {
		host, _, _ := strings.Cut(r.Host, ":")
		res := results[i]
		switch want[host] {
		case "dictionary":
			if !res.HTTPMessageSig.OK {
				t.Errorf("%s: http-message-sig 0.3.0 rejects the dictionary form: %s", host, res.HTTPMessageSig.Detail)
			}
			if res.WebBotAuth.OK {
				t.Errorf("%s: web-bot-auth 0.1.3 accepts the dictionary form; the string form has no reason to be", host)
			}
		case "string":
			if !res.WebBotAuth.OK {
				t.Errorf("%s: web-bot-auth 0.1.3 rejects the string form: %s", host, res.WebBotAuth.Detail)
			}
		}
	}
}

// npmResult is what testdata's verify.mjs says of a request.
type npmResult struct {
	HTTPMessageSig npmVerdict `json:"httpMessageSig"`
	WebBotAuth     npmVerdict `json:"webBotAuth"`
}

type npmVerdict struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// verifyWithNPM runs identity/testdata/npm/verify.mjs on reqs, as their
// origin received them, with the key directory dir, and returns what it
// says of each. The npm packages it imports are unpacked from the
// tarballs as published (packages.txt). Without node the test skips,
// unless ROBOTSGATE_NODE_REQUIRED is set (CI sets it).
func verifyWithNPM(t *testing.T, dir []byte, reqs []*http.Request) []npmResult {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("ROBOTSGATE_NODE_REQUIRED") != "" {
			t.Fatalf("node: %v (ROBOTSGATE_NODE_REQUIRED is set)", err)
		}
		t.Skipf("node is not installed (%v): Cloudflare's verifiers not run", err)
	}
	src := filepath.Join("identity", "testdata", "npm")
	work := t.TempDir()
	if err := unpackNPM(src, work); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(src, "verify.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "verify.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	type request struct {
		Method string      `json:"method"`
		URL    string      `json:"url"`
		Fields [][2]string `json:"fields"`
	}
	in := struct {
		Directory json.RawMessage `json:"directory"`
		Requests  []request       `json:"requests"`
	}{Directory: dir}
	for _, r := range reqs {
		rq := request{Method: r.Method, URL: "http://" + r.Host + r.URL.RequestURI()}
		for name, vals := range r.Header {
			for _, v := range vals {
				rq.Fields = append(rq.Fields, [2]string{strings.ToLower(name), v})
			}
		}
		in.Requests = append(in.Requests, rq)
	}
	stdin, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "verify.mjs")
	cmd.Dir, cmd.Stdin = work, bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node verify.mjs: %v\n%s", err, stderr.Bytes())
	}
	var res []npmResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(reqs) {
		t.Fatalf("verify.mjs said %s (%v); want %d results", out, err, len(reqs))
	}
	return res
}

// unpackNPM unpacks the tarballs packages.txt in src lists into work,
// each where it names, after checking its integrity (sha512, as npm's
// registry gives it), as npm would install them.
func unpackNPM(src, work string) error {
	list, err := os.Open(filepath.Join(src, "packages.txt"))
	if err != nil {
		return err
	}
	defer list.Close()
	sc := bufio.NewScanner(list)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 3 {
			return fmt.Errorf("%s:%d: want directory, tarball and integrity", list.Name(), n)
		}
		tgz, err := os.ReadFile(filepath.Join(src, "packages", f[1]))
		if err != nil {
			return err
		}
		sum := sha512.Sum512(tgz)
		if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != f[2] {
			return fmt.Errorf("%s: integrity %s; want %s", f[1], got, f[2])
		}
		if err := untar(tgz, filepath.Join(work, filepath.FromSlash(f[0]))); err != nil {
			return fmt.Errorf("%s: %w", f[1], err)
		}
	}
	return sc.Err()
}

// untar writes the files of an npm tarball (under "package/") in dst.
func untar(tgz []byte, dst string) error {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for range 1000 {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		_, name, ok := strings.Cut(h.Name, "/")
		if h.Typeflag != tar.TypeReg || !ok || !filepath.IsLocal(name) {
			continue
		}
		p := filepath.Join(dst, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		data, err := io.ReadAll(io.LimitReader(tr, 1<<22))
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return errors.New("more than 1000 files")
}
