// Manager plays kubelet's device manager for the end-to-end tests.
//
// It hosts kubelet's own registration server (package
// k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1), which accepts
// Register calls on kubelet.sock, dials each plugin and runs ListAndWatch with
// kubelet's own client. Manager is the ClientHandler behind it: it keeps the
// devices each plugin reports and, on Admit, chooses and allocates devices for
// a pod's containers the way kubelet does at admission (init containers
// first, their devices reused by later containers, GetPreferredAllocation when
// the plugin offers it, then Allocate and PreStartContainer).
//
// Thread-safety: every exported method may be called concurrently; plugin
// calls are made without holding the state lock.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

// rpcTimeout bounds every call into a plugin, as kubelet does.
const rpcTimeout = 10 * time.Second

type resourceState struct {
	plugin    plugin.DevicePlugin
	options   *pluginapi.DevicePluginOptions
	connected bool
	devices   map[string]*pluginapi.Device
	updates   int
}

// Manager is the device-manager side of kubelet. Create it with NewManager.
type Manager struct {
	admitMu   sync.Mutex // one admission at a time, as kubelet's sync loop
	mu        sync.Mutex
	resources map[string]*resourceState
	// allocated[resource] is the set of device ids held by admitted pods.
	allocated map[string]map[string]bool
	// pods[uid] lists what each admitted pod holds, for Release.
	pods map[string]*PodAllocation
}

// NewManager returns an empty device manager.
func NewManager() *Manager {
	return &Manager{
		resources: map[string]*resourceState{},
		allocated: map[string]map[string]bool{},
		pods:      map[string]*PodAllocation{},
	}
}

// CleanupPluginDirectory removes stale sockets from dir, like kubelet does
// before it listens on kubelet.sock.
func (m *Manager) CleanupPluginDirectory(logger klog.Logger, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read plugin directory %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PluginConnected records a newly dialled plugin and asks for its options.
func (m *Manager) PluginConnected(ctx context.Context, resource string, p plugin.DevicePlugin) error {
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	opts, err := p.API().GetDevicePluginOptions(cctx, &pluginapi.Empty{})
	if err != nil {
		return fmt.Errorf("GetDevicePluginOptions for %s: %w", resource, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resources[resource] = &resourceState{plugin: p, options: opts, connected: true,
		devices: map[string]*pluginapi.Device{}}
	klog.FromContext(ctx).Info("plugin connected", "resource", resource,
		"preferredAllocation", opts.GetPreferredAllocationAvailable,
		"preStartRequired", opts.PreStartRequired)
	return nil
}

// PluginDisconnected marks the resource's devices unusable. (kubelet waits a
// grace period before dropping capacity; allocation fails at once in both.)
func (m *Manager) PluginDisconnected(logger klog.Logger, resource, socketPath string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.resources[resource]; ok && st.plugin.SocketPath() == socketPath {
		st.connected = false
	}
	logger.Info("plugin disconnected", "resource", resource, "socket", socketPath)
}

// PluginListAndWatchReceiver replaces the device list of resource.
func (m *Manager) PluginListAndWatchReceiver(logger klog.Logger, resource string, resp *pluginapi.ListAndWatchResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.resources[resource]
	if !ok {
		return
	}
	st.devices = map[string]*pluginapi.Device{}
	for _, d := range resp.Devices {
		st.devices[d.ID] = d
	}
	st.updates++
}

// DeviceView is one device as the test driver sees it.
type DeviceView struct {
	ID        string `json:"id"`
	Health    string `json:"health"`
	NUMA      []int  `json:"numa,omitempty"`
	Allocated bool   `json:"allocated"`
}

// ResourceView is one registered resource as the test driver sees it.
type ResourceView struct {
	Connected           bool         `json:"connected"`
	PreferredAllocation bool         `json:"preferred_allocation"`
	PreStartRequired    bool         `json:"pre_start_required"`
	Updates             int          `json:"updates"`
	Capacity            int          `json:"capacity"`
	Allocatable         int          `json:"allocatable"`
	Devices             []DeviceView `json:"devices"`
}

// Resources reports every registered resource and its devices, sorted by id.
func (m *Manager) Resources() map[string]ResourceView {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]ResourceView{}
	for name, st := range m.resources {
		v := ResourceView{Connected: st.connected, Updates: st.updates,
			PreferredAllocation: st.options.GetPreferredAllocationAvailable,
			PreStartRequired:    st.options.PreStartRequired, Devices: []DeviceView{}}
		for id, d := range st.devices {
			dv := DeviceView{ID: id, Health: d.Health, Allocated: m.allocated[name][id]}
			if d.Topology != nil {
				for _, n := range d.Topology.Nodes {
					dv.NUMA = append(dv.NUMA, int(n.ID))
				}
			}
			v.Devices = append(v.Devices, dv)
			v.Capacity++
			if d.Health == pluginapi.Healthy && st.connected {
				v.Allocatable++
			}
		}
		sort.Slice(v.Devices, func(i, j int) bool { return v.Devices[i].ID < v.Devices[j].ID })
		out[name] = v
	}
	return out
}
