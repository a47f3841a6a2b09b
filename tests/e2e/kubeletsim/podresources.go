// Kubelet's pod-resources API (v1 List) for the end-to-end tests, served from
// the Manager's state the way kubelet serves it: every pod kubelet holds,
// including the one being admitted (kubelet adds a pod to its pod manager just
// before admitting it), with the devices each regular and sidecar container
// holds; plain init containers are not listed.
package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type podResourcesServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	m *Manager
}

func (s *podResourcesServer) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: s.m.podResources()}, nil
}

// servePodResources listens on socket (replacing a stale one) until the
// returned server is stopped.
func servePodResources(m *Manager, socket string) (*grpc.Server, error) {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on pod-resources socket %s: %w", socket, err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, &podResourcesServer{m: m})
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// podResources lists the pods being admitted or admitted, as kubelet's List.
func (m *Manager) podResources() []*podresourcesv1.PodResources {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*podresourcesv1.PodResources, 0, len(m.pods))
	for _, pa := range m.pods {
		pr := &podresourcesv1.PodResources{Name: pa.Name, Namespace: pa.Namespace}
		done := map[string][]ResourceResult{}
		for _, c := range pa.Containers {
			done[c.Name] = c.Resources
		}
		for _, c := range pa.spec {
			if c.Kind == "init" {
				continue
			}
			cr := &podresourcesv1.ContainerResources{Name: c.Name}
			for _, rr := range done[c.Name] {
				if len(rr.DeviceIDs) > 0 && rr.Allocate != nil {
					cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{
						ResourceName: rr.Resource, DeviceIds: rr.DeviceIDs})
				}
			}
			pr.Containers = append(pr.Containers, cr)
		}
		out = append(out, pr)
	}
	return out
}
