package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd starts an embedded single-member etcd with envtest-style flags and
// blocks until SIGTERM/SIGINT or a fatal server error.
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory (required)")
	clientURLs := fs.String("listen-client-urls", "http://127.0.0.1:2379", "client URLs")
	advClientURLs := fs.String("advertise-client-urls", "", "advertised client URLs (default: listen URLs)")
	peerURLs := fs.String("listen-peer-urls", "http://127.0.0.1:2380", "peer URLs")
	noFsync := fs.Bool("unsafe-no-fsync", true, "skip fsync (test only)")
	maxReq := fs.Uint("max-request-bytes", 16*1024*1024, "max client request size")
	quota := fs.Int64("quota-backend-bytes", 4*1024*1024*1024, "backend quota")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	_ = os.Chmod(*dataDir, 0o700)
	if *advClientURLs == "" {
		*advClientURLs = *clientURLs
	}
	cfg := embed.NewConfig()
	cfg.Name = "default"
	cfg.Dir = *dataDir
	cfg.UnsafeNoFsync = *noFsync
	cfg.MaxRequestBytes = *maxReq
	cfg.QuotaBackendBytes = *quota
	cfg.LogLevel = "error"
	var err error
	if cfg.ListenClientUrls, err = parseURLs(*clientURLs); err != nil {
		return fail(err)
	}
	if cfg.AdvertiseClientUrls, err = parseURLs(*advClientURLs); err != nil {
		return fail(err)
	}
	if cfg.ListenPeerUrls, err = parseURLs(*peerURLs); err != nil {
		return fail(err)
	}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fail(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd: ready")
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		return fail(fmt.Errorf("not ready after 60s"))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		return 0
	case err := <-e.Err():
		return fail(err)
	}
}

func parseURLs(s string) ([]url.URL, error) {
	var out []url.URL
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, *u)
	}
	return out, nil
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "etcd:", err)
	return 1
}
