// Admission: device choice and allocation for one pod, following kubelet's
// device manager (devicesToAllocate / allocateContainerResources) for a node
// without a topology manager policy.
//
// Thread-safety: Admit and Release may run concurrently with each other and
// with plugin updates; the state lock is dropped around plugin RPCs, as in
// kubelet, and device ids are reserved before the lock is dropped.
package main

import (
	"context"
	"fmt"
	"sort"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// ContainerSpec is one container of a pod to admit.
type ContainerSpec struct {
	Name string `json:"name"`
	// Kind is "init", "sidecar" (restartable init) or "regular" (default).
	Kind     string         `json:"kind,omitempty"`
	Requests map[string]int `json:"requests"`
}

// AdmitRequest is a pod to admit, containers in spec order.
type AdmitRequest struct {
	PodUID     string          `json:"pod_uid"`
	Namespace  string          `json:"namespace,omitempty"`
	Name       string          `json:"name,omitempty"`
	Containers []ContainerSpec `json:"containers"`
}

// ResourceResult is what happened for one (container, resource).
type ResourceResult struct {
	Resource        string                                          `json:"resource"`
	Count           int                                             `json:"count"`
	Reused          []string                                        `json:"reused"`
	PreferredCalled bool                                            `json:"preferred_called"`
	PreferredAvail  []string                                        `json:"preferred_available,omitempty"`
	Preferred       *pluginapi.ContainerPreferredAllocationResponse `json:"preferred,omitempty"`
	DeviceIDs       []string                                        `json:"device_ids"`
	Allocate        *pluginapi.ContainerAllocateResponse            `json:"allocate,omitempty"`
	PreStartCalled  bool                                            `json:"pre_start_called"`
}

// ContainerResult lists a container's per-resource results.
type ContainerResult struct {
	Name      string           `json:"name"`
	Kind      string           `json:"kind"`
	Resources []ResourceResult `json:"resources"`
}

// PodAllocation is the answer to Admit and what Pods reports.
type PodAllocation struct {
	PodUID     string            `json:"pod_uid"`
	Namespace  string            `json:"namespace,omitempty"`
	Name       string            `json:"name,omitempty"`
	Admitted   bool              `json:"admitted"`
	Error      string            `json:"error,omitempty"`
	Containers []ContainerResult `json:"containers"`
	held       map[string]map[string]bool
	spec       []ContainerSpec // the request's containers, for the pod-resources List
}

// Validate reports what is wrong with a request, with a hint to fix it.
func (r *AdmitRequest) Validate() error {
	if r.PodUID == "" {
		return fmt.Errorf("pod_uid is empty: give the pod's metadata.uid")
	}
	if len(r.Containers) == 0 {
		return fmt.Errorf("containers is empty: list the pod's containers in spec order")
	}
	seen := map[string]bool{}
	for _, c := range r.Containers {
		if c.Name == "" || seen[c.Name] {
			return fmt.Errorf("container name %q is empty or repeated: names must be unique", c.Name)
		}
		seen[c.Name] = true
		switch c.Kind {
		case "", "regular", "init", "sidecar":
		default:
			return fmt.Errorf("container %q: kind %q is not one of init, sidecar, regular", c.Name, c.Kind)
		}
		for res, n := range c.Requests {
			if n < 0 {
				return fmt.Errorf("container %q: request %s=%d is negative", c.Name, res, n)
			}
		}
	}
	return nil
}

// orderContainers puts init and sidecar containers first, as kubelet admits.
func orderContainers(cs []ContainerSpec) []ContainerSpec {
	var out []ContainerSpec
	for _, c := range cs {
		if c.Kind == "init" || c.Kind == "sidecar" {
			out = append(out, c)
		}
	}
	for _, c := range cs {
		if c.Kind == "" || c.Kind == "regular" {
			c.Kind = "regular"
			out = append(out, c)
		}
	}
	return out
}

// Admit allocates devices for every container of the pod. On any failure the
// pod's devices are released and the result carries the error, as kubelet
// rejects the pod with UnexpectedAdmissionError. Pods are admitted one at a
// time, as kubelet's sync loop does (its pod-resources List relies on it).
func (m *Manager) Admit(ctx context.Context, req AdmitRequest) (*PodAllocation, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	m.admitMu.Lock()
	defer m.admitMu.Unlock()
	m.mu.Lock()
	if _, dup := m.pods[req.PodUID]; dup {
		m.mu.Unlock()
		return nil, fmt.Errorf("pod %s is already admitted: release it first", req.PodUID)
	}
	pa := &PodAllocation{PodUID: req.PodUID, Namespace: req.Namespace, Name: req.Name,
		held: map[string]map[string]bool{}, spec: orderContainers(req.Containers)}
	m.pods[req.PodUID] = pa
	m.mu.Unlock()

	reuse := map[string]map[string]bool{} // resource -> ids from init containers
	for _, c := range orderContainers(req.Containers) {
		cr := ContainerResult{Name: c.Name, Kind: c.Kind, Resources: []ResourceResult{}}
		names := make([]string, 0, len(c.Requests))
		for res := range c.Requests {
			names = append(names, res)
		}
		sort.Strings(names)
		for _, res := range names {
			if c.Requests[res] == 0 {
				continue
			}
			rr, err := m.allocateOne(ctx, pa, req, c.Name, res, c.Requests[res], reuse[res])
			cr.Resources = append(cr.Resources, rr)
			if err != nil {
				m.mu.Lock()
				pa.Containers = append(pa.Containers, cr)
				m.mu.Unlock()
				pa.Error = fmt.Sprintf("container %q resource %s: %v", c.Name, res, err)
				m.Release(req.PodUID)
				return pa, nil
			}
			if reuse[res] == nil {
				reuse[res] = map[string]bool{}
			}
			for _, id := range rr.DeviceIDs {
				if c.Kind == "init" {
					reuse[res][id] = true
				} else {
					delete(reuse[res], id)
				}
			}
		}
		m.mu.Lock()
		pa.Containers = append(pa.Containers, cr)
		m.mu.Unlock()
	}
	m.mu.Lock()
	pa.Admitted = true
	m.mu.Unlock()
	return pa, nil
}

func sortedKeys(s map[string]bool) []string {
	out := make([]string, 0, len(s))
	for k, v := range s {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// allocateOne chooses and allocates count devices of res for one container.
func (m *Manager) allocateOne(ctx context.Context, pa *PodAllocation, req AdmitRequest,
	container, res string, count int, reusable map[string]bool) (ResourceResult, error) {
	rr := ResourceResult{Resource: res, Count: count, Reused: []string{}, DeviceIDs: []string{}}
	m.mu.Lock()
	st, ok := m.resources[res]
	if !ok || !st.connected {
		m.mu.Unlock()
		return rr, fmt.Errorf("cannot allocate unregistered device %s: is its device plugin running and registered?", res)
	}
	if m.allocated[res] == nil {
		m.allocated[res] = map[string]bool{}
	}
	if pa.held[res] == nil {
		pa.held[res] = map[string]bool{}
	}
	chosen := map[string]bool{}
	take := func(id string) {
		chosen[id] = true
		m.allocated[res][id] = true
		pa.held[res][id] = true
	}
	for _, id := range sortedKeys(reusable) {
		if len(chosen) < count {
			take(id)
			rr.Reused = append(rr.Reused, id)
		}
	}
	available := map[string]bool{}
	for id, d := range st.devices {
		if d.Health == pluginapi.Healthy && !m.allocated[res][id] {
			available[id] = true
		}
	}
	needed := count - len(chosen)
	if needed > 0 && len(available) < needed {
		m.mu.Unlock()
		return rr, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d",
			res, needed, len(available))
	}
	if needed > 0 && st.options.GetPreferredAllocationAvailable {
		offer := map[string]bool{}
		for id := range available {
			offer[id] = true
		}
		for id := range chosen {
			offer[id] = true
		}
		rr.PreferredCalled = true
		rr.PreferredAvail = sortedKeys(offer)
		must := sortedKeys(chosen)
		api := st.plugin.API()
		m.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := api.GetPreferredAllocation(cctx, &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
				AvailableDeviceIDs: rr.PreferredAvail, MustIncludeDeviceIDs: must,
				AllocationSize: int32(count)}}})
		cancel()
		m.mu.Lock()
		if err != nil {
			m.mu.Unlock()
			return rr, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %v", err)
		}
		if len(resp.ContainerResponses) > 0 {
			rr.Preferred = resp.ContainerResponses[0]
			for _, id := range rr.Preferred.DeviceIDs {
				if len(chosen) < count && available[id] && !m.allocated[res][id] {
					take(id)
				}
			}
		}
	}
	// kubelet falls back to any available device (in map order) when the
	// plugin's preference is missing or short.
	for id := range available {
		if len(chosen) < count && !m.allocated[res][id] {
			take(id)
		}
	}
	if len(chosen) < count {
		m.mu.Unlock()
		return rr, fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d",
			count, len(chosen))
	}
	rr.DeviceIDs = sortedKeys(chosen)
	api, preStart := st.plugin.API(), st.options.PreStartRequired
	m.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := api.Allocate(cctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: rr.DeviceIDs}}})
	if err != nil {
		return rr, fmt.Errorf("allocate failed for pod %s/%s container %s: %v", req.Namespace, req.Name, container, err)
	}
	if len(resp.ContainerResponses) != 1 {
		return rr, fmt.Errorf("plugin answered %d container responses to a request for 1", len(resp.ContainerResponses))
	}
	rr.Allocate = resp.ContainerResponses[0]
	if preStart {
		rr.PreStartCalled = true
		if _, err := api.PreStartContainer(cctx, &pluginapi.PreStartContainerRequest{DevicesIds: rr.DeviceIDs}); err != nil {
			return rr, fmt.Errorf("PreStartContainer failed: %v", err)
		}
	}
	return rr, nil
}

// Release frees every device the pod holds. It reports whether the pod was known.
func (m *Manager) Release(podUID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	pa, ok := m.pods[podUID]
	if !ok {
		return false
	}
	for res, ids := range pa.held {
		for id := range ids {
			delete(m.allocated[res], id)
		}
	}
	delete(m.pods, podUID)
	return true
}

// Pods lists the admitted pods.
func (m *Manager) Pods() []*PodAllocation {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*PodAllocation, 0, len(m.pods))
	for _, p := range m.pods {
		if p.Admitted {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PodUID < out[j].PodUID })
	return out
}
