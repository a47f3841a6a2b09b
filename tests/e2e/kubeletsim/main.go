// Command kubeletsim acts as kubelet's device manager for the end-to-end
// tests: it serves kubelet.sock for device-plugin registration with kubelet's
// own server code, runs ListAndWatch against each plugin, and lets the test
// driver admit pods over a loopback HTTP API (see api.go).
//
// Usage:
//
//	kubeletsim --plugin-dir DIR [--listen 127.0.0.1:0] [--addr-file FILE]
//	           [--pod-resources-socket FILE]
//
// The chosen HTTP address is printed as "listening on ADDR" and written to
// --addr-file when given. SIGINT/SIGTERM stop it cleanly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

// KubeletSocketName is the registration socket's name inside the plugin dir
// (kubelet's own is /var/lib/kubelet/device-plugins/kubelet.sock).
const KubeletSocketName = "kubelet.sock"

// Sim is a running kubeletsim: registration server plus HTTP API.
type Sim struct {
	Manager  *Manager
	Addr     string
	server   plugin.Server
	http     *http.Server
	listener net.Listener
	logger   klog.Logger
	podRes   *grpc.Server // nil without a pod-resources socket
}

// Start serves kubelet.sock in pluginDir and the HTTP API on listen.
func Start(ctx context.Context, pluginDir, listen string) (*Sim, error) {
	if !isLoopback(listen) {
		return nil, fmt.Errorf("--listen %q is not a loopback address: use 127.0.0.1:PORT", listen)
	}
	abs, err := filepath.Abs(pluginDir)
	if err != nil {
		return nil, fmt.Errorf("plugin dir %q: %w", pluginDir, err)
	}
	logger := klog.FromContext(ctx)
	m := NewManager()
	srv, err := plugin.NewServer(logger, filepath.Join(abs, KubeletSocketName), m, m)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(logger); err != nil {
		return nil, fmt.Errorf("start registration server in %s: %w (is another kubelet using it?)", abs, err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		_ = srv.Stop(logger)
		return nil, fmt.Errorf("listen on %s: %w", listen, err)
	}
	s := &Sim{Manager: m, Addr: ln.Addr().String(), server: srv, listener: ln, logger: logger,
		http: &http.Server{Handler: NewHandler(m), ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "http server stopped")
		}
	}()
	return s, nil
}

// ServePodResources also serves kubelet's pod-resources API (List) on socket.
func (s *Sim) ServePodResources(socket string) error {
	srv, err := servePodResources(s.Manager, socket)
	if err != nil {
		return err
	}
	s.podRes = srv
	return nil
}

// Stop closes the HTTP API, disconnects every plugin and removes kubelet.sock.
func (s *Sim) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	herr := s.http.Shutdown(ctx)
	if s.podRes != nil {
		s.podRes.Stop()
	}
	serr := s.server.Stop(s.logger)
	_ = os.Remove(s.server.SocketPath())
	return errors.Join(herr, serr)
}

func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func main() {
	klog.InitFlags(nil)
	pluginDir := flag.String("plugin-dir", "", "directory for kubelet.sock and plugin sockets (required)")
	listen := flag.String("listen", "127.0.0.1:0", "loopback address of the HTTP API")
	addrFile := flag.String("addr-file", "", "file to write the HTTP API address to")
	podResources := flag.String("pod-resources-socket", "", "also serve kubelet's pod-resources API (List) on this unix socket")
	flag.Parse()
	if *pluginDir == "" {
		fmt.Fprintln(os.Stderr, "kubeletsim: --plugin-dir is required: give the directory plugins register in")
		os.Exit(2)
	}
	if err := os.MkdirAll(*pluginDir, 0o750); err != nil {
		fmt.Fprintf(os.Stderr, "kubeletsim: cannot create %s: %v\n", *pluginDir, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	sim, err := Start(ctx, *pluginDir, *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeletsim: %v\n", err)
		os.Exit(1)
	}
	if *podResources != "" {
		if err := sim.ServePodResources(*podResources); err != nil {
			fmt.Fprintf(os.Stderr, "kubeletsim: %v\n", err)
			_ = sim.Stop()
			os.Exit(1)
		}
	}
	fmt.Printf("listening on %s\n", sim.Addr)
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(sim.Addr+"\n"), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "kubeletsim: write %s: %v\n", *addrFile, err)
		}
	}
	<-ctx.Done()
	if err := sim.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "kubeletsim: stop: %v\n", err)
		os.Exit(1)
	}
}
