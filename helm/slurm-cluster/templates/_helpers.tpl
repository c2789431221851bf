{{- define "slurm-cluster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object: the release name (or fullnameOverride), so `helm install slurm`
gives slurm-slurmctld, slurm-slurmrestd and a SlurmCluster named slurm. At most 40 characters,
so that <fullname>-slurmctld-0 and SlurmNodeSet pod names stay DNS labels. */}}
{{- define "slurm-cluster.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{- define "slurm-cluster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slurm-cluster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "slurm-cluster.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "slurm-cluster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slurm
{{- end }}

{{/* Labels of one component: (dict "ctx" . "component" "slurmctld") */}}
{{- define "slurm-cluster.componentLabels" -}}
{{ include "slurm-cluster.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "slurm-cluster.componentSelector" -}}
{{ include "slurm-cluster.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of a component's pod template: the selector's and the ones that never change, but
not helm.sh/chart and app.kubernetes.io/version, which would restart every daemon on each chart
version bump. (dict "ctx" . "component" "slurmctld") */}}
{{/* checksum/slurm-conf of the pods that read slurm.conf: of the ConfigMap's data only (its
labels carry the chart's version, which must not restart them). */}}
{{- define "slurm-cluster.slurmConfChecksum" -}}
{{- (include (print .Template.BasePath "/configmap.yaml") . | fromYaml).data | toJson | sha256sum }}
{{- end }}

{{- define "slurm-cluster.podLabels" -}}
{{ include "slurm-cluster.componentSelector" . }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: slurm
{{- end }}

{{/* image: (dict "ctx" . "image" .Values.images.slurmctld) */}}
{{- define "slurm-cluster.image" -}}
{{- $img := .image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (toString $img.tag) }}
{{- end }}
{{- end }}

{{- define "slurm-cluster.pullPolicy" -}}
{{- default .ctx.Values.imagePullPolicy .image.pullPolicy }}
{{- end }}

{{- define "slurm-cluster.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Slurm's ClusterName. */}}
{{- define "slurm-cluster.clusterName" -}}
{{- default (.Release.Name | lower | replace "-" "_" | replace "." "_" | trunc 40) .Values.clusterName }}
{{- end }}

{{/* Name of the SlurmCluster object (cluster-scoped: unique in the whole Kubernetes cluster). */}}
{{- define "slurm-cluster.clusterRef" -}}
{{- default (include "slurm-cluster.fullname" .) .Values.cluster.name }}
{{- end }}

{{/* "slurm-cluster.clusterNameKept" (dict "ctx" . "nodeSet" NAME "live" LIVE): fails when LIVE,
the SlurmNodeSet NAME as it is in the cluster (lookup; empty when there is none), belongs to this
release and joins another SlurmCluster than cluster.name now names: the CRD refuses a change of
spec.clusterName (immutable), and the upgrade would stop there, half applied. The pure part, so
that hack/helm-test.sh can give it a fake live object. */}}
{{- define "slurm-cluster.clusterNameKept" -}}
{{- $live := default dict .live }}
{{- $old := dig "spec" "clusterName" "" $live }}
{{- $new := include "slurm-cluster.clusterRef" .ctx }}
{{- $release := dig "metadata" "annotations" "meta.helm.sh/release-name" "" $live }}
{{- if and $old (ne $old $new) (eq $release .ctx.Release.Name) }}
{{- fail (printf "cluster.name: the SlurmNodeSet %s/%s joins SlurmCluster %q and this upgrade names %q, but a SlurmNodeSet's spec.clusterName is immutable. Keep cluster.name as installed (%q), or first delete the release's SlurmNodeSets (kubectl -n %s delete slurmnodesets -l app.kubernetes.io/instance=%s --wait: their nodes drain) and upgrade again, or install a new release (see the README's Upgrades)" .ctx.Release.Namespace .nodeSet $old $new $old .ctx.Release.Namespace .ctx.Release.Name) }}
{{- end }}
{{- end }}

{{/* The namespace slurm-operator reads SlurmClusters' Secrets from. */}}
{{- define "slurm-cluster.credentialsNamespace" -}}
{{- .Values.operatorCredentialsNamespace }}
{{- end }}

{{/* Whether the chart writes a copy of the JWT key into the operator's credentials namespace:
a SlurmCluster is created, no existing credentials Secret is named, and that namespace is not
the release's (there the JWT key Secret itself is labelled and used). */}}
{{- define "slurm-cluster.credentialsCopy" -}}
{{- if and .Values.cluster.create (not .Values.cluster.credentials.existingSecret) (ne (include "slurm-cluster.credentialsNamespace" .) .Release.Namespace) }}true{{ end }}
{{- end }}

{{/* Name of the Secret in the credentials namespace that the SlurmCluster's keySecretRef names:
cluster.credentials.existingSecret, else the JWT key Secret itself when the credentials
namespace is the release's, else the copy <SlurmCluster name>-jwt-key (unique there, since the
SlurmCluster's name is unique). */}}
{{- define "slurm-cluster.credentials.secret" -}}
{{- if .Values.cluster.credentials.existingSecret }}
{{- .Values.cluster.credentials.existingSecret }}
{{- else if eq (include "slurm-cluster.credentialsNamespace" .) .Release.Namespace }}
{{- include "slurm-cluster.jwtKey.secret" . }}
{{- else }}
{{- printf "%s-jwt-key" (include "slurm-cluster.clusterRef" .) | trunc 253 }}
{{- end }}
{{- end }}

{{- define "slurm-cluster.slurmctld.name" -}}{{ include "slurm-cluster.fullname" . }}-slurmctld{{- end }}
{{/* The slurmctld pod's hostname (StatefulSet pod 0): SlurmctldHost must equal it. */}}
{{- define "slurm-cluster.slurmctld.host" -}}{{ include "slurm-cluster.fullname" . }}-slurmctld-0{{- end }}
{{- define "slurm-cluster.slurmrestd.name" -}}{{ include "slurm-cluster.fullname" . }}-slurmrestd{{- end }}
{{- define "slurm-cluster.slurmdbd.name" -}}{{ include "slurm-cluster.fullname" . }}-slurmdbd{{- end }}
{{- define "slurm-cluster.mariadb.name" -}}{{ include "slurm-cluster.fullname" . }}-mariadb{{- end }}
{{- define "slurm-cluster.config.name" -}}{{ include "slurm-cluster.fullname" . }}-slurm-conf{{- end }}

{{- define "slurm-cluster.jwtKey.secret" -}}
{{- default (printf "%s-jwt-key" (include "slurm-cluster.fullname" .)) .Values.secrets.jwtKey.existingSecret }}
{{- end }}
{{- define "slurm-cluster.slurmKey.secret" -}}
{{- default (printf "%s-slurm-key" (include "slurm-cluster.fullname" .)) .Values.secrets.slurmKey.existingSecret }}
{{- end }}
{{- define "slurm-cluster.db.secret" -}}
{{- if .Values.accounting.mariadb.enabled }}
{{- printf "%s-db" (include "slurm-cluster.mariadb.name" .) }}
{{- else }}
{{- .Values.accounting.external.passwordSecret.name }}
{{- end }}
{{- end }}
{{- define "slurm-cluster.db.secretKey" -}}
{{- if .Values.accounting.mariadb.enabled }}password{{ else }}{{ .Values.accounting.external.passwordSecret.key }}{{ end }}
{{- end }}

{{/* slurmctld's address for slurmd --conf-server and SlurmctldHost: the headless Service,
which resolves to the pod even before it is ready. Qualified with the release's namespace:
slurmd pods of a SlurmNodeSet in another namespace (cluster.nodeSetNamespaces) resolve a bare
name in their own namespace, where no such Service is. */}}
{{- define "slurm-cluster.slurmctld.address" -}}
{{- printf "%s.%s.svc" (include "slurm-cluster.slurmctld.name" .) .Release.Namespace }}
{{- end }}

{{/* slurmdbd's address for AccountingStorageHost, qualified for the same reason: `sacct` and
`sacctmgr` in jobs on slurmd pods in other namespaces read it from the configless slurm.conf. */}}
{{- define "slurm-cluster.slurmdbd.address" -}}
{{- printf "%s.%s.svc" (include "slurm-cluster.slurmdbd.name" .) .Release.Namespace }}
{{- end }}

{{/* A quantity of memory ("64Gi", "1000M", 1073741824) in whole MiB, rounded down. */}}
{{- define "slurm-cluster.mebibytes" -}}
{{- $q := toString . }}
{{- $m := regexFindAll "^([0-9]+(?:\\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$" $q -1 }}
{{- if not $m }}
{{- fail (printf "memory quantity %q: use a number of bytes or one with a suffix Ki, Mi, Gi, Ti, k, M, G or T (e.g. 64Gi)" $q) }}
{{- end }}
{{- $num := regexReplaceAll "[A-Za-z]+$" $q "" | float64 }}
{{- $suffix := regexReplaceAll "^[0-9.]+" $q "" }}
{{- $factors := dict "" 1.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 }}
{{- divf (mulf $num (get $factors $suffix)) 1048576.0 | floor | int64 }}
{{- end }}

{{- /* A value written into a Slurm configuration file. Helm reads every number of a values file
as a float64, which toString writes as 1e+06 from a million on, and Slurm refuses that: a whole
number is written whole. */}}
{{- define "slurm-cluster.confValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- int64 . | toString -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end }}

{{/* An upgrade that renames the release's objects (fullnameOverride or nameOverride changed)
finds none of them under the new names: it would start another, empty Slurm cluster with new
keys (lookup finds no Secrets of those names) and leave the running one behind, and a changed
name label is refused by the API server part-way (selectors are immutable). The release's
slurmctld StatefulSet, found by its instance and component labels, must keep its name and name
label. "slurm-cluster.namesKept" looks it up (offline: nothing); "slurm-cluster.namesKeptFrom"
is the pure part, `live` a StatefulSetList. */}}
{{- define "slurm-cluster.namesKept" -}}
{{- $live := lookup "apps/v1" "StatefulSet" .Release.Namespace "" | default dict }}
{{- include "slurm-cluster.namesKeptFrom" (dict "ctx" . "live" $live) }}
{{- end }}

{{- define "slurm-cluster.namesKeptFrom" -}}
{{- $want := include "slurm-cluster.slurmctld.name" .ctx }}
{{- $label := include "slurm-cluster.name" .ctx }}
{{- $others := list }}
{{- $kept := false }}
{{- range (default list .live.items) }}
{{- $labels := default dict .metadata.labels }}
{{- if and (eq (get $labels "app.kubernetes.io/instance") $.ctx.Release.Name) (eq (get $labels "app.kubernetes.io/component") "slurmctld") }}
{{- if and (eq .metadata.name $want) (eq (get $labels "app.kubernetes.io/name") $label) }}
{{- $kept = true }}
{{- else }}
{{- $others = append $others (printf "%s (app.kubernetes.io/name: %s)" .metadata.name (get $labels "app.kubernetes.io/name")) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Another instance of this chart in the same release (an umbrella chart's alias) is one of
the others while this one's is there too. */}}
{{- if and $others (not $kept) }}
{{- fail (printf "this release's slurmctld is StatefulSet %s, and this upgrade names it %s (app.kubernetes.io/name: %s): fullnameOverride or nameOverride changed. New names would start another, empty Slurm cluster with new keys and leave the running one (its jobs, keys and SlurmCluster) behind, and a new name label is refused part-way (selectors are immutable). Set them back; to move to new names, install a new release" (join ", " $others) $want $label) }}
{{- end }}
{{- end }}
