{{/* The chart's name, or nameOverride. */}}
{{- define "vig.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects. */}}
{{- define "vig.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "vig.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "vig.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vig.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vig.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vig.labels" -}}
{{ include "vig.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* vig.yaml: listen: from the chart's values, the rest from values.config. */}}
{{- define "vig.config" -}}
{{- if hasKey .Values.config "listen" -}}
{{- fail "config.listen: set the listen addresses with values listen, metrics.port and probe.port (the probes and the Service use them)" -}}
{{- end -}}
{{- $host := ternary "127.0.0.1" "0.0.0.0" .Values.hostNetwork -}}
{{- $listen := dict "grpc" .Values.listen.grpc "metrics" (printf "0.0.0.0:%v" .Values.metrics.port) "http" (printf "%s:%v" $host .Values.probe.port) "insecure" true -}}
{{- if .Values.listen.ring -}}
{{- $_ := set $listen "ring" .Values.listen.ring -}}
{{- end -}}
{{- $listen = mergeOverwrite $listen (deepCopy .Values.listen.extra) -}}
{{- toYaml (mergeOverwrite (dict "listen" $listen) (deepCopy .Values.config)) -}}
{{- end -}}
