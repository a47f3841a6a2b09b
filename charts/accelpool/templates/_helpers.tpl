{{/* Names and labels shared by every template. */}}
{{- define "accelpool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "accelpool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "accelpool.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "accelpool.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "accelpool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "accelpool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: accelpool
{{- end -}}

{{- define "accelpool.selector" -}}
app.kubernetes.io/name: {{ include "accelpool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The accelpool image: repository@digest when image.digest is set, else repository:tag. */}}
{{- define "accelpool.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) -}}
{{- end -}}
{{- end -}}

{{/* kube-scheduler image: an explicit scheduler.image.tag wins; "" takes the cluster's own version
(.Capabilities.KubeVersion, vMAJOR.MINOR.PATCH with any "-eks-..." or "+k3s1" suffix removed), so the
scheduler is never newer than the apiserver it talks to. scheduler.image.digest pins it by digest instead. */}}
{{- define "accelpool.schedulerImage" -}}
{{- $tag := .Values.scheduler.image.tag | toString -}}
{{- if not .Values.scheduler.image.tag -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
{{- $tag = printf "v%d.%d.%d" $v.Major $v.Minor $v.Patch -}}
{{- end -}}
{{- if .Values.scheduler.image.digest -}}
{{- printf "%s@%s" .Values.scheduler.image.repository .Values.scheduler.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.scheduler.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* extender.tieBreakSalt as an integer string. A number from a values file is a float64 to Helm
(2837461923 would print as 2.837461923e+09, which the extender refuses), so it is printed with
%.0f: exact up to 2^53. A quoted string of digits passes as is (the whole uint64 range). */}}
{{- define "accelpool.tieBreakSalt" -}}
{{- $v := .Values.extender.tieBreakSalt -}}
{{- $s := "" -}}
{{- if kindIs "string" $v -}}
{{- $s = $v -}}
{{- else if kindIs "float64" $v -}}
{{- if ne (floor $v) $v -}}
{{- fail (printf "extender.tieBreakSalt must be a non-negative integer, got %v" $v) -}}
{{- end -}}
{{- $s = printf "%.0f" $v -}}
{{- else if kindIs "invalid" $v -}}
{{- $s = "0" -}}
{{- else -}}
{{- $s = toString $v -}}
{{- end -}}
{{- if not (regexMatch "^[0-9]+$" $s) -}}
{{- fail (printf "extender.tieBreakSalt must be a non-negative integer (quote values above 2^53 = 9007199254740992), got %v" $v) -}}
{{- end -}}
{{- $s -}}
{{- end -}}

{{/* <fullname>-<suffix> in at most <max> characters: the fullname is cut, never the suffix, so names
that differ only in their suffix (a vendor, a certgen step) stay apart. Called with
(list $ "suffix" max). The limits: 63 for Services, workloads and Jobs (a Job's name becomes a label
value of its pods), 52 for CronJobs (whose Jobs add 11 characters). Every name keeps the whole
fullname while it has at most 28 characters (the key rotation CronJob's limit; 39 for every vendor's
DaemonSet, 48 for the certgen Jobs, 49 for the device plugins' Service, 53 for the scheduler's). */}}
{{- define "accelpool.suffixedName" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- $keep := int (sub (index . 2) (add1 (len $suffix))) -}}
{{- printf "%s-%s" (include "accelpool.fullname" $root | trunc $keep | trimSuffix "-") $suffix -}}
{{- end -}}

{{/* Name of the scheduler+extender Deployment, Service, ServiceAccount. */}}
{{- define "accelpool.schedulerName" -}}
{{- include "accelpool.suffixedName" (list . "scheduler" 63) -}}
{{- end -}}

{{/* Name of the device plugins' Service, ServiceAccount, RBAC and NetworkPolicy. */}}
{{- define "accelpool.devicePluginName" -}}
{{- include "accelpool.suffixedName" (list . "device-plugin" 63) -}}
{{- end -}}

{{/* Name of vendor <v>'s device plugin DaemonSet: (list $ "nvidia"). */}}
{{- define "accelpool.devicePluginDaemonSet" -}}
{{- include "accelpool.suffixedName" (list (index . 0) (printf "device-plugin-%s" (index . 1)) 63) -}}
{{- end -}}

{{/* Name of the key rotation CronJob and of its ServiceAccount and RBAC. */}}
{{- define "accelpool.keyRotationName" -}}
{{- include "accelpool.suffixedName" (list . "assignment-key-rotation" 52) -}}
{{- end -}}

{{/* A whole number as digits, for flags and config fields. Numbers from a values file reach the
templates as float64, which prints 1000000 as 1e+06 (refused by the binaries); this prints it as
1000000. Anything else (an int from --set, a string) prints as it is, for the caller to check. */}}
{{- define "accelpool.digits" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- printf "%.0f" . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{- /* devicePlugin.priority.highPriorityNamespaces as the plugin's and the extender's
--high-priority-namespaces take it ("" when empty: nobody may have high task priority); a
list that is not namespace names, or "*" beside names, fails the render as the binaries would. */}}
{{- define "accelpool.highPriorityNamespaces" -}}
{{- $list := .Values.devicePlugin.priority.highPriorityNamespaces | default list -}}
{{- range $list -}}
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?|[*])$" (toString .)) -}}
{{- fail (printf "devicePlugin.priority.highPriorityNamespaces: %q is not a namespace name; list namespace names, or [\"*\"] for every namespace" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- if and (has "*" $list) (gt (len $list) 1) -}}
{{- fail "devicePlugin.priority.highPriorityNamespaces: \"*\" (every namespace) beside namespace names; give one or the other" -}}
{{- end -}}
{{- join "," $list -}}
{{- end -}}

{{- define "accelpool.tlsSecret" -}}
{{- printf "%s-extender-tls" (include "accelpool.fullname" .) -}}
{{- end -}}

{{- define "accelpool.keySecret" -}}
{{- .Values.assignmentSigning.secretName | default (printf "%s-assignment-key" (include "accelpool.fullname" .)) -}}
{{- end -}}

{{- define "accelpool.webhookName" -}}
{{- printf "%s-webhook" (include "accelpool.fullname" .) -}}
{{- end -}}

{{/* failurePolicy: explicit value, else Fail with more than one replica. */}}
{{- define "accelpool.failurePolicy" -}}
{{- if .Values.webhook.failurePolicy -}}
{{- .Values.webhook.failurePolicy -}}
{{- else if gt (int .Values.scheduler.replicas) 1 -}}
Fail
{{- else -}}
Ignore
{{- end -}}
{{- end -}}

{{/* DNS names of the extender Service, for its certificate. */}}
{{- define "accelpool.serviceDNS" -}}
{{- $svc := include "accelpool.schedulerName" . -}}
{{- list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) "localhost" | toJson -}}
{{- end -}}

{{/* The environment variables through which the device plugins apply a grant, as JSON lists
(CEL list literals): whole names and name prefixes. The same list as api::DeviceControlledEnv in
src/api/resources.cc, which the webhook refuses in a pod's env; tests/e2e/chart_security.py
(controlled-env) checks that the two agree. */}}
{{- define "accelpool.deviceControlledEnvNames" -}}
{{- list "CUDA_DEVICE_SM_LIMIT" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" "CUDA_MPS_PIPE_DIRECTORY" "ASCEND_VNPU_SPECS" "CUDA_TASK_PRIORITY" "NVIDIA_VISIBLE_DEVICES" "ASCEND_VISIBLE_DEVICES" "MTHREADS_VISIBLE_DEVICES" "CAMBRICON_VISIBLE_DEVICES" "NVIDIA_IMEX_CHANNELS" "ASCEND_RUNTIME_OPTIONS" | toJson -}}
{{- end -}}
{{- define "accelpool.deviceControlledEnvPrefixes" -}}
{{- list "ACCELPOOL_CUDA_" "CUDA_DEVICE_MEMORY_LIMIT" | toJson -}}
{{- end -}}
