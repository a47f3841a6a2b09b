package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"accelpool.io/e2e/kubeletsim/stubplugin"
)

const resName = "example.com/gpu"

// env is one kubeletsim with one registered stub plugin.
type env struct {
	sim  *Sim
	stub *stubplugin.Plugin
	base string
}

func startEnv(t *testing.T, opts stubplugin.Options, ids ...string) *env {
	t.Helper()
	// Unix socket paths are limited to about 100 bytes: keep the dir short.
	dir, err := os.MkdirTemp("", "ksim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sim, err := Start(context.Background(), dir, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = sim.Stop() })
	stub := stubplugin.New(dir, "stub.sock", resName, ids, opts)
	if err := stub.Start(); err != nil {
		t.Fatalf("stub Start: %v", err)
	}
	t.Cleanup(stub.Stop)
	if err := stub.Register(context.Background(), filepath.Join(dir, KubeletSocketName)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	e := &env{sim: sim, stub: stub, base: "http://" + sim.Addr}
	e.waitFor(t, func(r map[string]ResourceView) bool { return r[resName].Capacity == len(ids) })
	return e
}

func (e *env) resources(t *testing.T) map[string]ResourceView {
	t.Helper()
	resp, err := http.Get(e.base + "/v1/resources")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]ResourceView
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) waitFor(t *testing.T, cond func(map[string]ResourceView) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond(e.resources(t)) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("condition not reached; resources: %+v", e.resources(t))
}

func (e *env) post(t *testing.T, path, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(e.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

func (e *env) admit(t *testing.T, body string) (int, PodAllocation) {
	t.Helper()
	code, raw := e.post(t, "/v1/admit", body)
	var pa PodAllocation
	if err := json.Unmarshal(raw, &pa); err != nil {
		t.Fatalf("admit answer %s: %v", raw, err)
	}
	return code, pa
}

func TestRegistrationAndListAndWatch(t *testing.T) {
	e := startEnv(t, stubplugin.Options{}, "d0", "d1", "d2")
	r := e.resources(t)[resName]
	if !r.Connected || r.Allocatable != 3 || r.PreferredAllocation {
		t.Fatalf("after registration got %+v, want connected with 3 allocatable", r)
	}
	e.stub.SetHealth("d1", pluginapi.Unhealthy)
	e.waitFor(t, func(m map[string]ResourceView) bool { return m[resName].Allocatable == 2 })
	e.stub.Stop()
	e.waitFor(t, func(m map[string]ResourceView) bool { return !m[resName].Connected })
}

func TestAdmitFollowsKubelet(t *testing.T) {
	ids := []string{"d0", "d1", "d2", "d3"}
	cases := []struct {
		name      string
		opts      stubplugin.Options
		body      string
		wantCode  int
		wantIDs   map[string][]string // container -> device ids
		wantPref  bool
		wantStart int
		wantErr   string
	}{
		{name: "preferred allocation is honoured",
			opts:     stubplugin.Options{PreferredAllocation: true},
			body:     `{"pod_uid":"u1","containers":[{"name":"main","requests":{"example.com/gpu":2}}]}`,
			wantCode: 200, wantPref: true, wantIDs: map[string][]string{"main": {"d2", "d3"}}},
		{name: "init devices are reused by the app container",
			opts: stubplugin.Options{PreferredAllocation: true},
			body: `{"pod_uid":"u2","containers":[{"name":"main","requests":{"example.com/gpu":2}},` +
				`{"name":"warm","kind":"init","requests":{"example.com/gpu":1}}]}`,
			wantCode: 200, wantPref: true, wantIDs: map[string][]string{"warm": {"d3"}, "main": {"d2", "d3"}}},
		{name: "pre-start is called when the plugin asks",
			opts:     stubplugin.Options{PreStartRequired: true},
			body:     `{"pod_uid":"u3","containers":[{"name":"main","requests":{"example.com/gpu":4}}]}`,
			wantCode: 200, wantStart: 1, wantIDs: map[string][]string{"main": {"d0", "d1", "d2", "d3"}}},
		{name: "too many devices is rejected like kubelet",
			body:     `{"pod_uid":"u4","containers":[{"name":"main","requests":{"example.com/gpu":5}}]}`,
			wantCode: 409, wantErr: "Requested: 5, Available: 4"},
		{name: "unknown resource is rejected",
			body:     `{"pod_uid":"u5","containers":[{"name":"main","requests":{"other.io/npu":1}}]}`,
			wantCode: 409, wantErr: "unregistered device other.io/npu"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t, tc.opts, ids...)
			code, pa := e.admit(t, tc.body)
			if code != tc.wantCode {
				t.Fatalf("code %d, want %d; answer %+v", code, tc.wantCode, pa)
			}
			if tc.wantErr != "" {
				if !strings.Contains(pa.Error, tc.wantErr) {
					t.Fatalf("error %q, want it to contain %q", pa.Error, tc.wantErr)
				}
				if n := len(e.stub.Allocations()); n != 0 {
					t.Fatalf("plugin saw %d Allocate calls for a rejected pod", n)
				}
				return
			}
			got := map[string][]string{}
			for _, c := range pa.Containers {
				for _, r := range c.Resources {
					got[c.Name] = r.DeviceIDs
					if r.PreferredCalled != tc.wantPref {
						t.Errorf("%s: preferred_called %v, want %v", c.Name, r.PreferredCalled, tc.wantPref)
					}
					want := strings.Join(r.DeviceIDs, ",")
					if r.Allocate == nil || r.Allocate.Envs[stubplugin.EnvName] != want {
						t.Errorf("%s: Allocate answer %+v, want %s=%s", c.Name, r.Allocate, stubplugin.EnvName, want)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantIDs) {
				t.Fatalf("device ids %v, want %v", got, tc.wantIDs)
			}
			if n := e.stub.PreStarts(); n != tc.wantStart {
				t.Fatalf("PreStartContainer calls %d, want %d", n, tc.wantStart)
			}
		})
	}
}

func TestReleaseFreesDevices(t *testing.T) {
	e := startEnv(t, stubplugin.Options{}, "d0", "d1")
	body := `{"pod_uid":"%s","containers":[{"name":"main","requests":{"example.com/gpu":2}}]}`
	if code, pa := e.admit(t, fmt.Sprintf(body, "a")); code != 200 {
		t.Fatalf("first admit: %d %+v", code, pa)
	}
	if code, pa := e.admit(t, fmt.Sprintf(body, "b")); code != 409 || !strings.Contains(pa.Error, "Available: 0") {
		t.Fatalf("second admit on a full node: %d %+v, want 409 Available: 0", code, pa)
	}
	if code, raw := e.post(t, "/v1/release?pod_uid=a", ""); code != 200 {
		t.Fatalf("release: %d %s", code, raw)
	}
	if code, pa := e.admit(t, fmt.Sprintf(body, "b")); code != 200 {
		t.Fatalf("admit after release: %d %+v", code, pa)
	}
}

func TestBadRequests(t *testing.T) {
	e := startEnv(t, stubplugin.Options{}, "d0")
	cases := []struct{ name, path, body, want string }{
		{"not json", "/v1/admit", "{", "not a valid AdmitRequest"},
		{"unknown field", "/v1/admit", `{"pod":"x"}`, "unknown field"},
		{"no uid", "/v1/admit", `{"containers":[{"name":"c"}]}`, "pod_uid is empty"},
		{"no containers", "/v1/admit", `{"pod_uid":"u"}`, "containers is empty"},
		{"bad kind", "/v1/admit", `{"pod_uid":"u","containers":[{"name":"c","kind":"x"}]}`, "is not one of"},
		{"negative", "/v1/admit", `{"pod_uid":"u","containers":[{"name":"c","requests":{"a/b":-1}}]}`, "negative"},
		{"release without uid", "/v1/release", "", "pod_uid query parameter is missing"},
		{"release unknown", "/v1/release?pod_uid=nope", "", "holds no devices"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, raw := e.post(t, tc.path, tc.body)
			if code < 400 || code >= 500 || !strings.Contains(string(raw), tc.want) {
				t.Fatalf("got %d %s, want a 4xx containing %q", code, raw, tc.want)
			}
		})
	}
}

func TestStartRejectsNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.0.0.1:80", "nonsense"} {
		if _, err := Start(context.Background(), t.TempDir(), addr); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Start(%q) error %v, want a loopback error", addr, err)
		}
	}
}

// The pod-resources List, as kubelet's: the pod being admitted is listed from
// before its first Allocate (plain init containers are not), and a container
// is listed with its devices once allocated.
func TestPodResourcesListsThePodBeingAdmitted(t *testing.T) {
	var client podresourcesv1.PodResourcesListerClient
	var seen []string // one line per Allocate: "pod/container=resources;..."
	view := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
		if err != nil {
			return "error: " + err.Error()
		}
		var parts []string
		for _, p := range r.PodResources {
			for _, c := range p.Containers {
				n := 0
				for _, d := range c.Devices {
					n += len(d.DeviceIds)
				}
				parts = append(parts, fmt.Sprintf("%s/%s/%s=%d", p.Namespace, p.Name, c.Name, n))
			}
		}
		sort.Strings(parts)
		return strings.Join(parts, ";")
	}
	e := startEnv(t, stubplugin.Options{OnAllocate: func([]string) { seen = append(seen, view()) }},
		"d0", "d1", "d2")
	dir, err := os.MkdirTemp("", "prs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	if err := e.sim.ServePodResources(sock); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client = podresourcesv1.NewPodResourcesListerClient(conn)

	if code, pa := e.admit(t, `{"pod_uid":"u1","namespace":"ns","name":"p1","containers":[
		{"name":"i","kind":"init","requests":{"`+resName+`":1}},{"name":"main","requests":{"`+resName+`":2}}]}`); code != 200 || !pa.Admitted {
		t.Fatalf("admit p1: %d %+v", code, pa)
	}
	if code, pa := e.admit(t, `{"pod_uid":"u2","namespace":"ns","name":"p2","containers":[
		{"name":"main","requests":{"`+resName+`":1}}]}`); code != 200 || !pa.Admitted {
		t.Fatalf("admit p2: %d %+v", code, pa)
	}
	want := []string{
		"ns/p1/main=0",              // p1's init container: p1 listed, nothing allocated
		"ns/p1/main=0",              // p1's main
		"ns/p1/main=2;ns/p2/main=0", // p2's main: p1 done, p2 listed without devices
	}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("List during each Allocate:\n got %q\nwant %q", seen, want)
	}
	if got := view(); got != "ns/p1/main=2;ns/p2/main=1" {
		t.Fatalf("List after admission: %q", got)
	}
}
