{{/*
Name of the chart, or nameOverride.
*/}}
{{- define "gpulink-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name: the release name where it already contains the chart
name (helm install gpulink-exporter ...), else release-chart. Truncated to 63
characters because some Kubernetes name fields are limited to that (DNS-1123
labels).
*/}}
{{- define "gpulink-exporter.fullname" -}}
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

{{/*
Namespace of every object: the release namespace unless overridden, written
out explicitly so that the plain manifests in deploy/kubernetes carry it.
*/}}
{{- define "gpulink-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "gpulink-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "gpulink-exporter.labels" -}}
helm.sh/chart: {{ include "gpulink-exporter.chart" . }}
{{ include "gpulink-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: metrics
app.kubernetes.io/part-of: gpulink-exporter
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels: never change these between releases, a DaemonSet's selector
is immutable.
*/}}
{{- define "gpulink-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpulink-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpulink-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpulink-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: a digest wins over a tag; the tag defaults to the chart's
appVersion, which is the exporter's VERSION.
*/}}
{{- define "gpulink-exporter.image" -}}
{{- $registry := .Values.image.registry -}}
{{- $repository := .Values.image.repository -}}
{{- $ref := ternary (printf "%s/%s" $registry $repository) $repository (ne $registry "") -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $ref .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end }}

{{/*
Where the host's sysfs and procfs appear in the container.
*/}}
{{- define "gpulink-exporter.hostSysPath" -}}/host/sys{{- end }}
{{- define "gpulink-exporter.hostProcPath" -}}/host/proc{{- end }}

{{/*
Kubernetes object name for a dashboard file: fullname-dashboard-<file name
lower-cased, every character outside [a-z0-9-] turned into a dash>.
*/}}
{{- define "gpulink-exporter.dashboardName" -}}
{{- $file := .path | base | trimSuffix ".json" | lower -}}
{{- $file = regexReplaceAll "[^a-z0-9-]+" $file "-" | trimAll "-" -}}
{{- printf "%s-dashboard-%s" (include "gpulink-exporter.fullname" .root) $file | trunc 253 | trimSuffix "-" -}}
{{- end }}
