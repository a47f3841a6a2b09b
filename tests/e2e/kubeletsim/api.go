// Loopback HTTP API through which the test driver plays kubelet's admission.
//
//	GET  /healthz                 "ok"
//	GET  /v1/resources            registered resources and their devices
//	POST /v1/admit                AdmitRequest -> PodAllocation (GetPreferredAllocation, Allocate)
//	POST /v1/release?pod_uid=UID  frees the pod's devices
//	GET  /v1/pods                 admitted pods and what they hold
//
// Errors are JSON {"error": "..."} with a 4xx status for a bad request.
// Thread-safety: the handler is safe for concurrent requests.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// maxBody bounds a request body; a pod spec summary is far smaller.
const maxBody = 1 << 20

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// NewHandler serves the API for m.
func NewHandler(m *Manager) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /v1/resources", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Resources())
	})
	mux.HandleFunc("GET /v1/pods", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Pods())
	})
	mux.HandleFunc("POST /v1/admit", func(w http.ResponseWriter, r *http.Request) {
		var req AdmitRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest,
				"request body is not a valid AdmitRequest (%v): send JSON like "+
					`{"pod_uid":"u1","containers":[{"name":"main","requests":{"example.com/gpu":1}}]}`, err)
			return
		}
		pa, err := m.Admit(r.Context(), req)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		code := http.StatusOK
		if !pa.Admitted {
			// The pod was rejected the way kubelet rejects it at admission.
			code = http.StatusConflict
		}
		writeJSON(w, code, pa)
	})
	mux.HandleFunc("POST /v1/release", func(w http.ResponseWriter, r *http.Request) {
		uid := r.URL.Query().Get("pod_uid")
		if uid == "" {
			writeError(w, http.StatusBadRequest, "pod_uid query parameter is missing: POST /v1/release?pod_uid=UID")
			return
		}
		if !m.Release(uid) {
			writeError(w, http.StatusNotFound, "pod %s holds no devices here: check the uid with GET /v1/pods", uid)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"released": uid})
	})
	return mux
}
