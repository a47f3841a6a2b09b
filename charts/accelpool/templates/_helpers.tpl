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

{{/* Name of the scheduler+extender Deployment, Service, ServiceAccount. */}}
{{- define "accelpool.schedulerName" -}}
{{- printf "%s-scheduler" (include "accelpool.fullname" .) | trunc 63 | trimSuffix "-" -}}
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
