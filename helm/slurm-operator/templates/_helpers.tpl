{{/* Chart name, truncated to 63 characters (a DNS label). */}}
{{- define "slurm-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, or <release>-<chart> when the release name
does not already contain the chart name. */}}
{{/* The metrics Service's name: a Service name is a DNS label, at most 63 characters, so the
fullname is cut to make room for the suffix. */}}
{{- define "slurm-operator.metricsService" -}}
{{- printf "%s-metrics" (include "slurm-operator.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "slurm-operator.fullname" -}}
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

{{- define "slurm-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slurm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slurm-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The `helm test` Pod's labels that the NetworkPolicy admits it by (the operator's pods carry
app.kubernetes.io/component: operator). */}}
{{- define "slurm-operator.testSelectorLabels" -}}
{{ include "slurm-operator.selectorLabels" . }}
app.kubernetes.io/component: test-ready
{{- end }}

{{- define "slurm-operator.labels" -}}
helm.sh/chart: {{ include "slurm-operator.chart" . }}
{{ include "slurm-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slurm-operator
{{- end }}

{{- define "slurm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "slurm-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "slurm-operator.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The namespace the operator reads SlurmClusters' Secrets and ConfigMaps from
(--credentials-namespace): credentialsNamespace, else the release namespace. */}}
{{- define "slurm-operator.credentialsNamespace" -}}
{{- default .Release.Namespace .Values.credentialsNamespace }}
{{- end }}

{{/* The watched namespaces, sorted and without duplicates, joined by ","; empty = all. */}}
{{- define "slurm-operator.watchNamespaces" -}}
{{- without (.Values.watchNamespaces | default list | uniq | sortAlpha) "" | join "," }}
{{- end }}

{{- define "slurm-operator.leaseName" -}}
{{- default (printf "%s-leader" (include "slurm-operator.fullname" .)) .Values.leaderElection.leaseName }}
{{- end }}

{{/* Who may write, as the Deployment records it (annotation slurm.rs/writers): "lease:<name>"
with leader election, "alone" without. */}}
{{- define "slurm-operator.writers" -}}
{{- if .Values.leaderElection.enabled }}lease:{{ include "slurm-operator.leaseName" . }}{{ else }}alone{{ end }}
{{- end }}

{{/* The rollout strategy. A rolling update overlaps old and new pods, which is safe only when
both sides elect through the same Lease: an upgrade that turns leader election on or off or
renames the Lease would run two writers (two submits of one SlurmJob), so it replaces the pods
instead. The live Deployment is read with lookup (empty under `helm template`, and `helm
rollback` renders nothing again: there, change these values with the operator scaled to 0). */}}
{{- define "slurm-operator.strategy" -}}
{{- $live := lookup "apps/v1" "Deployment" .Release.Namespace (include "slurm-operator.fullname" .) }}
{{- $was := "" }}
{{- if $live }}{{ $was = dig "metadata" "annotations" "slurm.rs/writers" "unknown" $live }}{{ end }}
{{- if and .Values.leaderElection.enabled (or (not $live) (eq $was (include "slurm-operator.writers" .))) -}}
RollingUpdate
{{- else -}}
Recreate
{{- end }}
{{- end }}

{{/* RUST_LOG: the full filter when given, else the level for our crate over "warn" (the
binary's own default is "warn,slurm_operator=info"). */}}
{{- define "slurm-operator.rustLog" -}}
{{- if .Values.log.filter }}
{{- .Values.log.filter }}
{{- else }}
{{- printf "warn,slurm_operator=%s" .Values.log.level }}
{{- end }}
{{- end }}

{{/* Cross-field checks that values.schema.json cannot express. */}}
{{- define "slurm-operator.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicas is %d but leaderElection.enabled is false: with more than one replica every pod would reconcile the same objects. Set leaderElection.enabled=true or replicas=1." (int .Values.replicas)) }}
{{- end }}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- fail "serviceAccount.create is false, so serviceAccount.name must name an existing ServiceAccount" }}
{{- end }}
{{- end }}

{{/* The Secret with the key that signs ownership tags (--tag-key-secret): tagKey.secretName,
else <fullname>-tag-key. */}}
{{- define "slurm-operator.tagKeySecret" -}}
{{- default (printf "%s-tag-key" (include "slurm-operator.fullname" .)) .Values.tagKey.secretName }}
{{- end }}
