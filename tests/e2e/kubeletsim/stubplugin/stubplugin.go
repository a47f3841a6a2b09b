// Package stubplugin is a minimal device plugin used to prove kubeletsim's
// wiring: it serves the v1beta1 DevicePlugin API on a unix socket, registers
// with kubelet.sock, streams its devices (and health changes) through
// ListAndWatch, prefers the highest-sorted available ids in
// GetPreferredAllocation (so a test can tell a preference from kubelet's
// fallback), and answers Allocate with an environment variable naming the ids.
//
// Thread-safety: all methods are safe for concurrent use.
package stubplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// EnvName is the variable Allocate sets to the comma-joined device ids.
const EnvName = "STUB_VISIBLE_DEVICES"

// Options selects the optional calls the plugin asks kubelet for.
type Options struct {
	PreferredAllocation bool
	PreStartRequired    bool
	// OnAllocate, when set, is called at the start of each Allocate (as a
	// plugin that looks around before answering).
	OnAllocate func(ids []string)
}

func (o Options) api() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: o.PreferredAllocation,
		PreStartRequired: o.PreStartRequired}
}

// Plugin is one stub device plugin. Create it with New.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	resource  string
	socket    string
	options   Options
	mu        sync.Mutex
	devices   map[string]string // id -> health
	watchers  []chan struct{}
	allocates [][]string
	preStarts int
	server    *grpc.Server
}

// New returns a plugin for resource with the given device ids, serving on
// dir/endpoint once started.
func New(dir, endpoint, resource string, ids []string, opts Options) *Plugin {
	p := &Plugin{resource: resource, socket: filepath.Join(dir, endpoint), options: opts,
		devices: map[string]string{}}
	for _, id := range ids {
		p.devices[id] = pluginapi.Healthy
	}
	return p
}

// Start serves the DevicePlugin API on the plugin's socket.
func (p *Plugin) Start() error {
	_ = os.Remove(p.socket)
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", p.socket, err)
	}
	p.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(ln) }()
	return nil
}

// Stop ends the server and every ListAndWatch stream.
func (p *Plugin) Stop() {
	if p.server != nil {
		p.server.Stop()
	}
	_ = os.Remove(p.socket)
}

// Register announces the plugin to the kubelet socket at kubeletSocket.
func (p *Plugin) Register(ctx context.Context, kubeletSocket string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(cctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(p.socket),
		ResourceName: p.resource, Options: p.options.api()})
	return err
}

// SetHealth changes one device's health and pushes the list to watchers.
func (p *Plugin) SetHealth(id, health string) {
	p.mu.Lock()
	p.devices[id] = health
	for _, w := range p.watchers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
}

// Allocations returns the device ids of every Allocate call so far.
func (p *Plugin) Allocations() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]string(nil), p.allocates...)
}

// PreStarts counts PreStartContainer calls.
func (p *Plugin) PreStarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.preStarts
}

func (p *Plugin) list() *pluginapi.ListAndWatchResponse {
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &pluginapi.ListAndWatchResponse{}
	for id, h := range p.devices {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: h})
	}
	sort.Slice(resp.Devices, func(i, j int) bool { return resp.Devices[i].ID < resp.Devices[j].ID })
	return resp
}

// GetDevicePluginOptions returns the options given to New.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options.api(), nil
}

// ListAndWatch sends the device list, then again after every SetHealth.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	changed := make(chan struct{}, 1)
	p.mu.Lock()
	p.watchers = append(p.watchers, changed)
	p.mu.Unlock()
	for {
		if err := stream.Send(p.list()); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation keeps the must-include ids and fills up with the
// highest-sorted available ones.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		picked := append([]string(nil), cr.MustIncludeDeviceIDs...)
		in := map[string]bool{}
		for _, id := range picked {
			in[id] = true
		}
		avail := append([]string(nil), cr.AvailableDeviceIDs...)
		sort.Sort(sort.Reverse(sort.StringSlice(avail)))
		for _, id := range avail {
			if len(picked) >= int(cr.AllocationSize) {
				break
			}
			if !in[id] {
				picked = append(picked, id)
				in[id] = true
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: picked})
	}
	return resp, nil
}

// Allocate answers each container with EnvName set to its sorted ids.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	if p.options.OnAllocate != nil {
		for _, cr := range req.ContainerRequests {
			p.options.OnAllocate(cr.DevicesIds)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cr := range req.ContainerRequests {
		ids := append([]string(nil), cr.DevicesIds...)
		sort.Strings(ids)
		for _, id := range ids {
			if _, ok := p.devices[id]; !ok {
				return nil, fmt.Errorf("unknown device %q", id)
			}
		}
		p.allocates = append(p.allocates, ids)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{EnvName: strings.Join(ids, ",")}})
	}
	return resp, nil
}

// PreStartContainer counts the call.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	p.preStarts++
	p.mu.Unlock()
	return &pluginapi.PreStartContainerResponse{}, nil
}
