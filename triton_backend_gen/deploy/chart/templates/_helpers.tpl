{{/* Names and labels, as `helm create` spells them. */}}
{{- define "triton.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "triton.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "triton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "triton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "triton.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "triton.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
Rules values.schema.json cannot say; each fails the render with what to change.
*/}}
{{- define "triton.validate" -}}
{{- $p := .Values.ports -}}
{{- if or (eq (int $p.http) (int $p.grpc)) (eq (int $p.http) (int $p.metrics)) (eq (int $p.grpc) (int $p.metrics)) -}}
{{- fail (printf "ports: http (%v), grpc (%v) and metrics (%v) must differ; give each its own port" $p.http $p.grpc $p.metrics) -}}
{{- end -}}
{{- if gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas) -}}
{{- fail (printf "autoscaling: minReplicas (%v) is above maxReplicas (%v)" .Values.autoscaling.minReplicas .Values.autoscaling.maxReplicas) -}}
{{- end -}}
{{- if and .Values.server.loadModels (ne .Values.server.modelControlMode "explicit") -}}
{{- fail (printf "server.loadModels needs server.modelControlMode=explicit (it is %s)" .Values.server.modelControlMode) -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (eq .Values.autoscaling.metric "cpu") (not .Values.resources.requests.cpu) -}}
{{- fail "autoscaling.metric=cpu measures use against resources.requests.cpu: set it" -}}
{{- end -}}
{{- end -}}

{{/* The Pods metric an adapter serves for autoscaling.metric (see README: the adapter rule). */}}
{{- define "triton.podsMetric" -}}
{{- if .Values.autoscaling.adapterMetricName -}}
{{- .Values.autoscaling.adapterMetricName -}}
{{- else if eq .Values.autoscaling.metric "queue_time" -}}
tbgen_queue_time_us
{{- else -}}
nv_inference_pending_request_count
{{- end -}}
{{- end -}}
