package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// runHealthcheck exits 0 if URL (by default the configured listener's
// /healthz) answers 200 within 2 seconds: the Docker HEALTHCHECK, which
// needs no shell or curl in the image.
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("healthcheck", stderr)
	target := fs.String("url", "", "`URL` to check; default http://<listen>/healthz of the config")
	path := fs.String("config", "", "config `FILE` whose listen address to check")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *target == "" {
		cfg, err := loadConfig(*path, nil)
		if err != nil {
			return err
		}
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: %w", cfg.Listen, err)
		}
		if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
			host = "127.0.0.1" // listening everywhere: ask on loopback
			if err == nil && a.Is6() && !a.Is4In6() {
				host = "::1"
			}
		}
		*target = "http://" + net.JoinHostPort(host, port) + "/healthz"
	}
	if u, err := url.Parse(*target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: healthcheck: -url %q is not an http:// or https:// URL", errUsage, *target)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *target, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil}} // never the environment's proxy
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errUnhealthy, *target, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s answered %s", errUnhealthy, *target, resp.Status)
	}
	_, err = fmt.Fprintf(stdout, "ok: %s\n", *target)
	return err
}
