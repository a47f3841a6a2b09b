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

{{- define "accelpool.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
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
