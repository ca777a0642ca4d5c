{{/* Names and labels shared by the templates. */}}

{{- define "neuronfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "neuronfleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "neuronfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "neuronfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "neuronfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "neuronfleet.labels" -}}
helm.sh/chart: {{ include "neuronfleet.chart" . }}
{{ include "neuronfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: neuronfleet
{{- end }}

{{- define "neuronfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "neuronfleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "neuronfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Cluster-wide peering unless the operator watches a list of namespaces (Kopf's rule). */}}
{{- define "neuronfleet.clusterwide" -}}
{{- if .Values.operator.watchNamespaces }}false{{ else }}true{{ end }}
{{- end }}
