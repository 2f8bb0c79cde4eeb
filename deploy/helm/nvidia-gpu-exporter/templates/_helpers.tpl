{{/* Whether the chart stands in for dcgm-exporter's (dcgmExporterCompatible: KUBERNETES.md, "In place of
dcgm-exporter"): its names, labels, port, probes and scrape settings instead of this chart's. */}}
{{- define "nvidia-gpu-exporter.dcgmCompatible" -}}
{{- if .Values.dcgmExporterCompatible }}true{{ end }}
{{- end }}

{{/* Chart name, truncated to the 63 characters of a DNS label; dcgm-exporter's chart's name when standing in. */}}
{{- define "nvidia-gpu-exporter.name" -}}
{{- $chartName := ternary "dcgm-exporter" .Chart.Name (.Values.dcgmExporterCompatible | default false) }}
{{- default $chartName .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, plus the chart name unless the release name contains it (the
algorithm of dcgm-exporter's chart too, so a stand-in under its release name gets its object names). */}}
{{- define "nvidia-gpu-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "nvidia-gpu-exporter.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "nvidia-gpu-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* dcgm-exporter's chart selects by name, instance and component (its _helpers.tpl "dcgm-exporter.selectorLabels"). */}}
{{- define "nvidia-gpu-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nvidia-gpu-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if include "nvidia-gpu-exporter.dcgmCompatible" . }}
app.kubernetes.io/component: {{ include "nvidia-gpu-exporter.name" . }}
{{- end }}
{{- end }}

{{- define "nvidia-gpu-exporter.labels" -}}
helm.sh/chart: {{ include "nvidia-gpu-exporter.chart" . }}
{{ include "nvidia-gpu-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- if not (include "nvidia-gpu-exporter.dcgmCompatible" .) }}
app.kubernetes.io/component: metrics
{{- end }}
{{- end }}

{{/* The label the GPU Operator's dcgm-exporter Service selects pods by, and its ServiceMonitor Services by (and
takes the job from: jobLabel app). */}}
{{- define "nvidia-gpu-exporter.gpuOperatorLabels" -}}
app: nvidia-dcgm-exporter
{{- end }}

{{/* The exporter's port and its name: dcgm-exporter's 9400 `metrics` when standing in for it. */}}
{{- define "nvidia-gpu-exporter.port" -}}
{{- if include "nvidia-gpu-exporter.dcgmCompatible" . }}9400{{ else }}{{ int .Values.port }}{{ end }}
{{- end }}

{{- define "nvidia-gpu-exporter.servicePort" -}}
{{- if include "nvidia-gpu-exporter.dcgmCompatible" . }}9400{{ else }}{{ int .Values.service.port }}{{ end }}
{{- end }}

{{- define "nvidia-gpu-exporter.portName" -}}
{{- if include "nvidia-gpu-exporter.dcgmCompatible" . }}metrics{{ else }}http{{ end }}
{{- end }}

{{/* The --metrics.profile passed ("" = the exporter's default); dcgm when standing in for dcgm-exporter. */}}
{{- define "nvidia-gpu-exporter.profile" -}}
{{- if include "nvidia-gpu-exporter.dcgmCompatible" . }}
{{- if eq .Values.metrics.profile "nvidia_smi" }}
{{- fail "dcgmExporterCompatible serves DCGM names: metrics.profile must be dcgm, both or empty" }}
{{- end }}
{{- default "dcgm" .Values.metrics.profile }}
{{- else }}
{{- .Values.metrics.profile }}
{{- end }}
{{- end }}

{{/* A probe of the values; standing in for dcgm-exporter, an HTTP probe asks `path` on the `metrics` port as
dcgm-exporter's DaemonSets do, its timing kept. Arguments: (list $ probe path). */}}
{{- define "nvidia-gpu-exporter.probe" -}}
{{- $root := index . 0 }}
{{- $probe := index . 1 | default dict | deepCopy }}
{{- if and $probe (hasKey $probe "httpGet") (include "nvidia-gpu-exporter.dcgmCompatible" $root) }}
{{- $_ := set $probe "httpGet" (dict "path" (index . 2) "port" "metrics") }}
{{- end }}
{{- if $probe }}
{{- toYaml $probe }}
{{- end }}
{{- end }}

{{- define "nvidia-gpu-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nvidia-gpu-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "nvidia-gpu-exporter.image" -}}
{{- $repository := required "image.repository is empty: set it to the registry and name of the exporter image (the released chart has the release's image; see the chart README)" .Values.image.repository }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Prometheus job the chart's monitor gives its targets: app.kubernetes.io/name (the monitors' jobLabel), or,
standing in for dcgm-exporter, the Service's name, as its chart's ServiceMonitor (no jobLabel) gives. */}}
{{- define "nvidia-gpu-exporter.monitorJob" -}}
{{- if and (include "nvidia-gpu-exporter.dcgmCompatible" .) (not .Values.podMonitor.enabled) }}
{{- include "nvidia-gpu-exporter.fullname" . }}
{{- else }}
{{- include "nvidia-gpu-exporter.name" . }}
{{- end }}
{{- end }}

{{/* The job the NvidiaGpuExporterDown rule selects: the monitor's unless the values name another. */}}
{{- define "nvidia-gpu-exporter.job" -}}
{{- $job := dig "exporterDown" "job" "" .Values.prometheusRule }}
{{- default (include "nvidia-gpu-exporter.monitorJob" .) $job }}
{{- end }}

{{/* Built-in relabelings of both monitors, then the user's. With pod labels on the series, the target's own
`pod` and `container` (the exporter's pod) are dropped, so only a workload's pod labels remain (docs/dcgm.md).
Standing in for dcgm-exporter, the user's alone, as its chart: `instance` stays the target's address. */}}
{{- define "nvidia-gpu-exporter.relabelings" -}}
{{- $relabelings := list }}
{{- if not .compatible }}
{{- if .podLabels }}
{{- $relabelings = append $relabelings (dict "action" "labeldrop" "regex" "pod|container") }}
{{- end }}
{{- if .monitor.instanceFromNodeName }}
{{- $relabelings = append $relabelings (dict "sourceLabels" (list "__meta_kubernetes_pod_node_name") "targetLabel" "instance" "action" "replace") }}
{{- end }}
{{- $relabelings = append $relabelings (dict "sourceLabels" (list "__meta_kubernetes_pod_node_name") "targetLabel" "node" "action" "replace") }}
{{- end }}
{{- with concat $relabelings (.monitor.relabelings | default list) }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/* Name of the doctor's ClusterRole and ClusterRoleBinding: cluster-scoped, so the namespace is part of it. */}}
{{- define "nvidia-gpu-exporter.doctorRbacName" -}}
{{- printf "%s-%s-doctor" .Release.Namespace (include "nvidia-gpu-exporter.fullname" .) }}
{{- end }}

{{/* The ClusterRole (and its binding) that lets --kubernetes.pod-metadata list pods; cluster-scoped, so per namespace. */}}
{{- define "nvidia-gpu-exporter.podMetadataRbacName" -}}
{{- printf "%s-%s-pod-metadata" .Release.Namespace (include "nvidia-gpu-exporter.fullname" .) }}
{{- end }}

{{/* The kubelet's PodResources directory: the socket's, mounted read-only at the same path. */}}
{{- define "nvidia-gpu-exporter.podResourcesDir" -}}
{{- dir .Values.kubernetes.podResources.socketPath }}
{{- end }}

{{/* Whether the pod uses the host's PID namespace: asked for, or needed by process → pod attribution. */}}
{{- define "nvidia-gpu-exporter.hostPID" -}}
{{- if or .Values.hostPID .Values.kubernetes.processPods.enabled }}true{{ end }}
{{- end }}

{{/* The pod's RuntimeClass: none with the demo backend, which reads no GPU and so runs on clusters without the
NVIDIA runtime (KUBERNETES.md's "try the chart without GPUs"). */}}
{{- define "nvidia-gpu-exporter.runtimeClassName" -}}
{{- if ne .Values.backend "demo" }}{{ .Values.runtimeClassName }}{{ end }}
{{- end }}

{{/* Whether the pod mounts its ServiceAccount token: asked for, or needed by the doctor's API checks or the pod
metadata list. */}}
{{- define "nvidia-gpu-exporter.automountToken" -}}
{{- if or .Values.automountServiceAccountToken .Values.doctor.rbac.create .Values.kubernetes.processPods.podMetadata.enabled }}true{{ else }}false{{ end }}
{{- end }}

{{/* A security context (pod or container level) with uid 0 when GPU → pod attribution needs the kubelet's
socket, which is root's; everything else (no privilege escalation, no capabilities, seccomp, read-only root)
stays as the values say. Arguments: (list $ context). */}}
{{- define "nvidia-gpu-exporter.securityContext" -}}
{{- $root := index . 0 }}
{{- $context := index . 1 | default dict | deepCopy }}
{{- $container := gt (len .) 2 }}
{{- if $root.Values.kubernetes.podResources.enabled }}
{{- $_ := set $context "runAsUser" 0 }}
{{- $_ = set $context "runAsGroup" 0 }}
{{- $_ = set $context "runAsNonRoot" false }}
{{- end }}
{{- $kernelLog := $root.Values.kernelLog | default dict }}
{{- if and $container $kernelLog.enabled (eq ($kernelLog.type | default "CharDevice") "CharDevice") }}
{{- /* Reading /dev/kmsg under kernel.dmesg_restrict=1 takes CAP_SYSLOG; every other capability stays dropped. */}}
{{- $capabilities := get $context "capabilities" | default dict }}
{{- $_ := set $capabilities "add" (append (get $capabilities "add" | default list) "SYSLOG" | uniq) }}
{{- $_ = set $context "capabilities" $capabilities }}
{{- end }}
{{- if $context }}
{{- toYaml $context }}
{{- end }}
{{- end }}

{{/* Where the dcgm-exporter counters file is mounted, and its file name there ("" = no counters file). */}}
{{- define "nvidia-gpu-exporter.dcgmCountersDir" -}}
/etc/nvidia-gpu-exporter/dcgm
{{- end }}

{{- define "nvidia-gpu-exporter.dcgmCountersKey" -}}
{{- if .Values.dcgm.counters }}counters.csv{{ else if .Values.dcgm.countersConfigMap.name }}{{ .Values.dcgm.countersConfigMap.key }}{{ end }}
{{- end }}

{{/* Fleet mode (docs/fleet.md): where the Deployment mounts the targets file, known_hosts and the SSH key. */}}
{{- define "nvidia-gpu-exporter.fleetDir" -}}
/etc/nvidia-gpu-exporter/fleet
{{- end }}

{{- define "nvidia-gpu-exporter.fleetKeyDir" -}}
/etc/nvidia-gpu-exporter/ssh
{{- end }}

{{/* The targets file as rendered into the ConfigMap: fleet.targets, with defaults.identity_file and
defaults.known_hosts pointing at the mounted key and known_hosts unless the values set them. */}}
{{- define "nvidia-gpu-exporter.fleetTargetsFile" -}}
{{- $targets := .Values.fleet.targets | default dict | deepCopy }}
{{- $defaults := get $targets "defaults" | default dict }}
{{- if not (hasKey $defaults "identity_file") }}
{{- $_ := set $defaults "identity_file" (printf "%s/id" (include "nvidia-gpu-exporter.fleetKeyDir" .)) }}
{{- end }}
{{- if not (hasKey $defaults "known_hosts") }}
{{- $_ := set $defaults "known_hosts" (printf "%s/known_hosts" (include "nvidia-gpu-exporter.fleetDir" .)) }}
{{- end }}
{{- $_ := set $targets "defaults" $defaults }}
{{- toYaml $targets }}
{{- end }}

{{/* The target names of fleet.targets (its targets and every group's), sorted, one per line. */}}
{{- define "nvidia-gpu-exporter.fleetTargetNames" -}}
{{- $names := list }}
{{- range $name, $_ := (get (.Values.fleet.targets | default dict) "targets" | default dict) }}
{{- $names = append $names $name }}
{{- end }}
{{- range $_, $group := (get (.Values.fleet.targets | default dict) "groups" | default dict) }}
{{- range $name, $_ := (get ($group | default dict) "targets" | default dict) }}
{{- $names = append $names $name }}
{{- end }}
{{- end }}
{{- $names | sortAlpha | uniq | join "\n" }}
{{- end }}
