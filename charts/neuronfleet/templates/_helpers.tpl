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

{{- /*
The operator's account, which the chart binds its roles to. Without create, never the namespace's
`default` account: every pod of the release's namespace that names no account runs as it, and
would get the operator's cluster-wide rights. An account of the release's full name might not
exist, or be another's: the name must be given.
*/}}
{{- define "neuronfleet.serviceAccountName" -}}
{{- $why := printf "every pod of namespace %s that names no account would run with the operator's cluster-wide rights (and its IAM role), and the operator refuses InferenceDeployments there whose workloads name no account (they would run as it)" .Release.Namespace }}
{{- if eq .Values.serviceAccount.name "default" }}
{{- fail (printf "serviceAccount.name is default, the namespace's default account: %s. Name an account of the operator's own, or leave serviceAccount.name empty with serviceAccount.create=true" $why) }}
{{- end }}
{{- $name := "" }}
{{- if .Values.serviceAccount.create }}
{{- $name = default (include "neuronfleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- $name = required "serviceAccount.create is false but serviceAccount.name is empty: name the existing ServiceAccount the operator runs as, which the chart binds the operator's roles to (falling back to the namespace's default account would give its rights to every pod there that names no account), or set serviceAccount.create=true" .Values.serviceAccount.name }}
{{- end }}
{{- /* The name the account resolves to, not only the value given: fullnameOverride (or a release named default) makes it too. */}}
{{- if eq $name "default" }}
{{- fail (printf "the operator's account would be the namespace's default account (serviceAccount.name is empty, and the release's full name, from fullnameOverride or the release and chart names, is default): %s. Set serviceAccount.name to an account of the operator's own, or another fullnameOverride" $why) }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "neuronfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Cluster-wide peering unless the operator watches a list of namespaces (Kopf's rule). */}}
{{- define "neuronfleet.clusterwide" -}}
{{- if .Values.operator.watchNamespaces }}false{{ else }}true{{ end }}
{{- end }}

{{- /*
A namespaced install (operator.watchNamespaces) creates objects in each watched namespace (the
KopfPeering, the RoleBinding of the operator's rights there), so the namespaces must exist first;
and one created later without its KopfPeering would make Kopf pause the operator in every
namespace. Fails with what to do when a watched namespace is missing. Only against a cluster:
without one (`helm template`) lookup lists nothing.
*/}}
{{- define "neuronfleet.checkWatchedNamespaces" -}}
{{- if and .Values.operator.watchNamespaces (or .Values.rbac.create (and .Values.peering.enabled .Values.peering.createObject)) }}
{{- $live := (lookup "v1" "Namespace" "" "").items | default list }}
{{- if $live }}
{{- $names := list }}
{{- range $live }}{{ $names = append $names .metadata.name }}{{ end }}
{{- $missing := list }}
{{- range .Values.operator.watchNamespaces }}{{ if not (has . $names) }}{{ $missing = append $missing . }}{{ end }}{{ end }}
{{- if $missing }}
{{- $what := printf "namespace %s does not exist" (first $missing) }}
{{- if gt (len $missing) 1 }}{{ $what = printf "namespaces %s do not exist" (join ", " $missing) }}{{ end }}
{{- fail (printf "operator.watchNamespaces: %s. Create the watched namespaces first (kubectl create namespace %s), then install or upgrade: the chart creates objects in each (its KopfPeering, the operator's RoleBinding), and a watched namespace that appears later without one makes Kopf pause the operator in every namespace" $what (join " " $missing)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
