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

{{/*
The web config (TLS, basic auth) from web.existingSecret: where it is
mounted, and a check that what web says it turns on has a Secret to come
from.
*/}}
{{- define "gpulink-exporter.webDir" -}}/etc/gpulink-exporter/web{{- end }}
{{- define "gpulink-exporter.webCheck" -}}
{{- if and (or .Values.web.tls.enabled .Values.web.basicAuth.enabled) (not .Values.web.existingSecret) }}
{{- fail "web.tls.enabled and web.basicAuth.enabled need web.existingSecret: the Secret holding the exporter's web config (and the credentials Prometheus sends)" }}
{{- end }}
{{- end }}

{{/*
http or https, as web.tls says.
*/}}
{{- define "gpulink-exporter.scheme" -}}{{ ternary "https" "http" .Values.web.tls.enabled }}{{- end }}

{{/*
tlsConfig of a ServiceMonitor or PodMonitor endpoint with web.tls: the CA
from the web Secret when web.tls.caKey names one, else no verification;
.extra (serviceMonitor.tlsConfig) merged over it. Empty without TLS but
for .extra.
*/}}
{{- define "gpulink-exporter.monitorTLSConfig" -}}
{{- $root := .root }}
{{- $tls := dict }}
{{- if $root.Values.web.tls.enabled }}
{{- if $root.Values.web.tls.caKey }}
{{- $tls = dict "ca" (dict "secret" (dict "name" $root.Values.web.existingSecret "key" $root.Values.web.tls.caKey)) }}
{{- else }}
{{- $tls = dict "insecureSkipVerify" true }}
{{- end }}
{{- end }}
{{- $tls = mergeOverwrite $tls (deepCopy (.extra | default dict)) }}
{{- with $tls }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
A ServiceMonitor or PodMonitor endpoint's scheme, TLS and basic auth, as
web says. The Secret must be in the monitor's namespace.
*/}}
{{- define "gpulink-exporter.monitorAuth" -}}
scheme: {{ include "gpulink-exporter.scheme" .root }}
{{- with include "gpulink-exporter.monitorTLSConfig" . }}
tlsConfig:
  {{- . | nindent 2 }}
{{- end }}
{{- if .root.Values.web.basicAuth.enabled }}
basicAuth:
  username:
    name: {{ .root.Values.web.existingSecret }}
    key: {{ .root.Values.web.basicAuth.usernameKey }}
  password:
    name: {{ .root.Values.web.existingSecret }}
    key: {{ .root.Values.web.basicAuth.passwordKey }}
{{- end }}
{{- end }}

{{/*
What the ServiceMonitor, the PodMonitor and the ring ServiceMonitor share:
metadata (.name, .values' namespace and additionalLabels) and a spec that
selects the exporters' pods in the release's namespace. The caller goes on
with the spec's endpoints.
*/}}
{{- define "gpulink-exporter.monitorHead" -}}
{{- $root := .root -}}
metadata:
  name: {{ .name }}
  namespace: {{ default (include "gpulink-exporter.namespace" $root) .values.namespace }}
  labels:
    {{- include "gpulink-exporter.labels" $root | nindent 4 }}
    {{- with .values.additionalLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  namespaceSelector:
    matchNames:
      - {{ include "gpulink-exporter.namespace" $root }}
  selector:
    matchLabels:
      {{- include "gpulink-exporter.selectorLabels" $root | nindent 6 }}
{{- end }}

{{/*
The metrics endpoint of the ServiceMonitor and the PodMonitor: one body
for both, so they scrape alike. instance becomes the node name
(kube-prometheus's choice for node-exporter): the pod IP would start new
series at every restart, resetting the rules' baselines.
*/}}
{{- define "gpulink-exporter.metricsEndpoint" -}}
{{- $sm := .Values.serviceMonitor -}}
- port: metrics
  path: /metrics
  {{- include "gpulink-exporter.monitorAuth" (dict "root" . "extra" $sm.tlsConfig) | nindent 2 }}
  {{- with $sm.interval }}
  interval: {{ . }}
  {{- end }}
  {{- with $sm.scrapeTimeout }}
  scrapeTimeout: {{ . }}
  {{- end }}
  honorLabels: {{ $sm.honorLabels }}
  # The operator names the job after the Service (or PodMonitor) and sets
  # instance to the pod's address; the rules and dashboards know the job
  # as jobName, and a node by its name. These run after the operator's
  # own relabelings, so they win.
  relabelings:
    {{- with $sm.jobName }}
    - action: replace
      targetLabel: job
      replacement: {{ . }}
    {{- end }}
    - action: replace
      sourceLabels: [__meta_kubernetes_pod_node_name]
      targetLabel: instance
    {{- with $sm.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $sm.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
GPU nodes by the label gpuNodes names: one required node affinity term per
label, any of which selects a node (terms are ORed). Empty for none.
*/}}
{{- define "gpulink-exporter.gpuNodeTerms" -}}
{{- $operator := list (dict "matchExpressions" (list (dict "key" "nvidia.com/gpu.present" "operator" "In" "values" (list "true")))) }}
{{- $gfd := list (dict "matchExpressions" (list (dict "key" "nvidia.com/gpu.count" "operator" "Exists"))) }}
{{- $nfd := list }}
{{- range list "pci-10de.present" "pci-0302_10de.present" "pci-0300_10de.present" }}
{{- $nfd = append $nfd (dict "matchExpressions" (list (dict "key" (printf "feature.node.kubernetes.io/%s" .) "operator" "In" "values" (list "true")))) }}
{{- end }}
{{- $terms := dict "gpuOperator" $operator "gfd" $gfd "nfd" $nfd "any" (concat $operator $gfd $nfd) "none" list }}
{{- if not (hasKey $terms .Values.gpuNodes) }}
{{- fail (printf "gpuNodes must be any, gpuOperator, gfd, nfd or none, not %q" .Values.gpuNodes) }}
{{- end }}
{{- with get $terms .Values.gpuNodes }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
The pod's affinity: affinity's own, with the GPU node terms as its required
node affinity. Where affinity sets required node terms of its own, each of
its terms is ANDed with each GPU node term.
*/}}
{{- define "gpulink-exporter.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- $gpu := include "gpulink-exporter.gpuNodeTerms" . | fromYamlArray }}
{{- if $gpu }}
{{- $na := get $affinity "nodeAffinity" | default dict }}
{{- $req := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict }}
{{- $own := get $req "nodeSelectorTerms" | default list }}
{{- $terms := $gpu }}
{{- if $own }}
{{- $terms = list }}
{{- range $o := $own }}
{{- range $g := $gpu }}
{{- $t := dict "matchExpressions" (concat (get $g "matchExpressions") (get $o "matchExpressions" | default list)) }}
{{- with get $o "matchFields" }}
{{- $_ := set $t "matchFields" . }}
{{- end }}
{{- $terms = append $terms $t }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set $req "nodeSelectorTerms" $terms }}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" $req }}
{{- $_ := set $affinity "nodeAffinity" $na }}
{{- end }}
{{- with $affinity }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
A health check: the values' own when they name a handler, else GET / (over
HTTPS with web.tls), or a TCP connect with web.basicAuth, whose 401 would
fail a GET.
*/}}
{{- define "gpulink-exporter.healthProbe" -}}
{{- $p := deepCopy (.probe | default dict) }}
{{- $root := .root }}
{{- if not (or $p.httpGet $p.tcpSocket $p.exec $p.grpc) }}
{{- if $root.Values.web.basicAuth.enabled }}
{{- $_ := set $p "tcpSocket" (dict "port" "metrics") }}
{{- else }}
{{- $_ := set $p "httpGet" (dict "path" "/" "port" "metrics" "scheme" (upper (include "gpulink-exporter.scheme" $root))) }}
{{- end }}
{{- end }}
{{- toYaml $p }}
{{- end }}

{{/*
The node-to-node modules file (--node-probe.config.file), or "" for none:
nodeProbe.modules, and with nodeProbe.enabled behind web's TLS or basic
auth, each module (nccl_ring when none is given) calling its targets' join
and reserve endpoints as web says, unless the module sets its own
http_client.
*/}}
{{- define "gpulink-exporter.nodeProbeModules" -}}
{{- $modules := deepCopy (.Values.nodeProbe.modules | default dict) }}
{{- $web := .Values.web }}
{{- if and .Values.nodeProbe.enabled (or $web.tls.enabled $web.basicAuth.enabled) }}
{{- if not $modules }}
{{- $modules = dict "nccl_ring" dict }}
{{- end }}
{{- $dir := include "gpulink-exporter.webDir" . }}
{{- $client := dict }}
{{- if $web.basicAuth.enabled }}
{{- $_ := set $client "basic_auth" (dict "username_file" (printf "%s/%s" $dir $web.basicAuth.usernameKey) "password_file" (printf "%s/%s" $dir $web.basicAuth.passwordKey)) }}
{{- end }}
{{- if $web.tls.enabled }}
{{- if $web.tls.caKey }}
{{- $_ := set $client "tls_config" (dict "ca_file" (printf "%s/%s" $dir $web.tls.caKey)) }}
{{- else }}
{{- $_ := set $client "tls_config" (dict "insecure_skip_verify" true) }}
{{- end }}
{{- end }}
{{- range $name, $m := $modules }}
{{- $m = $m | default dict }}
{{- if not (hasKey $m "http_client") }}
{{- $_ := set $m "http_client" $client }}
{{- end }}
{{- $_ := set $modules $name $m }}
{{- end }}
{{- end }}
{{- with $modules }}
{{- dict "modules" . | toYaml }}
{{- end }}
{{- end }}

{{/*
"true" where the pod is made RDMA-capable: node-to-node probes on, and an
RDMA device plugin's resource or the host's /dev/infiniband asked for.
*/}}
{{- define "gpulink-exporter.rdma" -}}
{{- $rdma := .Values.nodeProbe.rdma | default dict }}
{{- if and .Values.nodeProbe.enabled (or $rdma.resources $rdma.hostDevices) }}true{{ end }}
{{- end }}

{{/*
"true" where the host's /dev/infiniband is mounted (rdma.hostDevices).
*/}}
{{- define "gpulink-exporter.rdmaHostDevices" -}}
{{- if and (include "gpulink-exporter.rdma" .) .Values.nodeProbe.rdma.hostDevices }}true{{ end }}
{{- end }}

{{/*
The container's resources: resources, with the RDMA device plugin's
resources added to requests and limits (an extended resource's request
must equal its limit).
*/}}
{{- define "gpulink-exporter.resources" -}}
{{- $res := deepCopy (.Values.resources | default dict) }}
{{- if include "gpulink-exporter.rdma" . }}
{{- range $name, $n := .Values.nodeProbe.rdma.resources }}
{{- range $kind := list "requests" "limits" }}
{{- $m := get $res $kind | default dict }}
{{- $_ := set $m $name $n }}
{{- $_ := set $res $kind $m }}
{{- end }}
{{- end }}
{{- end }}
{{- with $res }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
The container's security context: securityContext, with IPC_LOCK added
where the pod does RDMA (NCCL pins its buffers past RLIMIT_MEMLOCK), and
privileged with the host's /dev/infiniband (the device cgroup admits a
hostPath device only then; Kubernetes refuses privileged without
allowPrivilegeEscalation).
*/}}
{{- define "gpulink-exporter.securityContext" -}}
{{- $sc := deepCopy (.Values.securityContext | default dict) }}
{{- if include "gpulink-exporter.rdma" . }}
{{- $caps := get $sc "capabilities" | default dict }}
{{- $add := get $caps "add" | default list }}
{{- if not (has "IPC_LOCK" $add) }}
{{- $add = append $add "IPC_LOCK" }}
{{- end }}
{{- $_ := set $caps "add" $add }}
{{- $_ := set $sc "capabilities" $caps }}
{{- end }}
{{- if include "gpulink-exporter.rdmaHostDevices" . }}
{{- $_ := set $sc "privileged" true }}
{{- $_ := set $sc "allowPrivilegeEscalation" true }}
{{- end }}
{{- with $sc }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
Where nccl.hostPath is mounted.
*/}}
{{- define "gpulink-exporter.ncclDir" -}}/host/nccl{{- end }}

{{/*
The Secret holding the node-to-node token (nodeProbe.auth), or "" where
the ring has none: the user's, or the one nodeprobe-token-secret.yaml
makes.
*/}}
{{- define "gpulink-exporter.nodeProbeTokenSecret" -}}
{{- if and .Values.nodeProbe.enabled .Values.nodeProbe.auth.enabled }}
{{- .Values.nodeProbe.auth.existingSecret | default (printf "%s-node-probe-token" (include "gpulink-exporter.fullname" .)) }}
{{- end }}
{{- end }}
{{- define "gpulink-exporter.nodeProbeTokenDir" -}}/etc/gpulink-exporter/node-probe-token{{- end }}
