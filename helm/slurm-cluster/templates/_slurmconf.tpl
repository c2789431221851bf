{{/* slurm.conf: the chart's defaults, overridden by slurm.config, then NodeSets, partitions
and slurm.extraConfig. Served to slurmd by slurmctld (configless). */}}
{{- define "slurm-cluster.slurmConf" -}}
{{- $v := .Values }}
{{- $model := include "slurm-cluster.model" . | fromYaml }}
{{- /* disable_token_creation: only SlurmUser and root may `scontrol token`. The operator signs
its own tokens; a tenant's job script must not mint itself a long-lived one that reaches
slurmrestd or slurmctld past the operator's access checks. */}}
{{- $conf := dict
  "ClusterName" (include "slurm-cluster.clusterName" .)
  "SlurmctldHost" (printf "%s(%s)" (include "slurm-cluster.slurmctld.host" .) (include "slurm-cluster.slurmctld.address" .))
  "SlurmctldPort" "6817"
  "SlurmdPort" "6818"
  "SlurmUser" $v.slurm.user
  "SlurmdUser" "root"
  "AuthType" "auth/slurm"
  "CredType" "cred/slurm"
  "AuthAltTypes" "auth/jwt"
  "AuthAltParameters" "jwt_key=/etc/slurm/jwt_hs256.key,disable_token_creation"
  "SlurmctldParameters" "enable_configless"
  "StateSaveLocation" "/var/spool/slurmctld"
  "SlurmdSpoolDir" "/var/spool/slurmd"
  "SlurmctldPidFile" "/run/slurmctld/slurmctld.pid"
  "SlurmdPidFile" "/run/slurmd/slurmd.pid"
  "SlurmctldDebug" $v.slurm.debug
  "SlurmdDebug" $v.slurm.debug
  "ProctrackType" "proctrack/linuxproc"
  "TaskPlugin" "task/none"
  "JobAcctGatherType" (ternary "jobacct_gather/linux" "jobacct_gather/none" $v.accounting.enabled)
  "SelectType" "select/cons_tres"
  "SelectTypeParameters" "CR_Core"
  "SchedulerType" "sched/backfill"
  "ReturnToService" "2"
  "SlurmdTimeout" "60"
  "MaxNodeCount" (include "slurm-cluster.confValue" $v.slurm.maxNodeCount)
  "TreeWidth" "65533"
  "MpiDefault" "none"
  "MailProg" "/bin/true"
}}
{{- if $model.gresTypes }}{{ $_ := set $conf "GresTypes" (join "," $model.gresTypes) }}{{ end }}
{{- if $v.slurm.cgroup.enabled }}
{{- $_ := set $conf "ProctrackType" "proctrack/cgroup" }}
{{- $_ := set $conf "TaskPlugin" "task/cgroup,task/affinity" }}
{{- if $v.accounting.enabled }}{{ $_ := set $conf "JobAcctGatherType" "jobacct_gather/cgroup" }}{{ end }}
{{- end }}
{{- if $v.slurmctld.metrics.enabled }}
{{- $_ := set $conf "MetricsType" "metrics/openmetrics" }}
{{- end }}
{{- if $v.accounting.enabled }}
{{- $_ := set $conf "AccountingStorageType" "accounting_storage/slurmdbd" }}
{{- $_ := set $conf "AccountingStorageHost" (include "slurm-cluster.slurmdbd.address" .) }}
{{- $_ := set $conf "AccountingStoragePort" (toString $v.accounting.slurmdbd.port) }}
{{- /* Slurm, not the operator, keeps a team's job scripts to their own accounts and QoS (a
script may itself `sbatch -A other`): without enforcement it takes any account silently. */}}
{{- $_ := set $conf "AccountingStorageEnforce" "associations,limits,qos" }}
{{- end }}
{{- /* slurm.conf keys are case-insensitive: one spelled otherwise than the chart's would be a
second line, and the last one wins past the checks below. */}}
{{- range $k, $_ := $v.slurm.config }}
{{- range $c := keys $conf }}
{{- if and (eq (lower $k) (lower $c)) (ne $k $c) }}
{{- fail (printf "slurm.config.%s: write it %s, as the chart does (slurm.conf keys are case-insensitive: the file would set it twice)" $k $c) }}
{{- end }}
{{- end }}
{{- end }}
{{- if regexMatch "(?im)^[ \t]*AccountingStorageEnforce[ \t]*=" ($v.slurm.extraConfig | default "") }}
{{- fail "slurm.extraConfig sets AccountingStorageEnforce: set it in slurm.config.AccountingStorageEnforce instead, where the chart checks cluster.access against it" }}
{{- end }}
{{- range $k, $val := $v.slurm.config }}
{{- if or (kindIs "invalid" $val) (eq (toString $val) "") }}
{{- $_ := unset $conf $k }}
{{- else }}
{{- $_ := set $conf $k (include "slurm-cluster.confValue" $val) }}
{{- end }}
{{- end }}
{{- /* A cluster.access entry's accounts and qos narrow only what the operator submits; the job's
script may submit again itself, which only Slurm's enforcement stops (as `qos`, `limits`, `safe`
and `wckeys` do, each implies `associations`). */}}
{{- if $v.cluster.create }}
{{- $enforce := list }}
{{- range splitList "," (lower (get $conf "AccountingStorageEnforce")) }}{{ $enforce = append $enforce (trim .) }}{{ end }}
{{- $associations := false }}
{{- range list "associations" "limits" "qos" "safe" "wckeys" }}{{ if has . $enforce }}{{ $associations = true }}{{ end }}{{ end }}
{{- range $i, $entry := $v.cluster.access }}
{{- if and $entry.accounts (not (and (get $conf "AccountingStorageType") $associations)) }}
{{- fail (printf "cluster.access[%d].accounts: Slurm keeps a job's script to those accounts only with accounting and AccountingStorageEnforce=associations (without, a script may submit under any account): set accounting.enabled=true (which sets AccountingStorageEnforce=associations,limits,qos), or drop the entry's accounts" $i) }}
{{- end }}
{{- if and $entry.qos (not (and (get $conf "AccountingStorageType") (has "qos" $enforce))) }}
{{- fail (printf "cluster.access[%d].qos: Slurm keeps a job's script to its association's QoS only with accounting and AccountingStorageEnforce=qos (without, a script may submit with any QoS): set accounting.enabled=true (which sets AccountingStorageEnforce=associations,limits,qos), or drop the entry's qos" $i) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $v.slurmctld.metrics.enabled (get $conf "PrivateData") }}
{{- fail "slurmctld.metrics.enabled: Slurm serves no metrics while slurm.conf sets PrivateData; remove slurm.config.PrivateData or turn the metrics off" }}
{{- end -}}
# slurm.conf rendered by the slurm-cluster chart ({{ .Release.Name }}); edit values, not this file.
# Nodes are dynamic (slurmd -Z in SlurmNodeSet pods, managed by slurm-operator); MaxNodeCount bounds them.
{{- range $k := keys $conf | sortAlpha }}
{{ $k }}={{ get $conf $k }}
{{- end }}

# NodeSets: each set's pods carry a feature named after the set.
{{- range $name := keys $model.nodesets | sortAlpha }}
NodeSet={{ $name }} Feature={{ $name }}
{{- end }}
{{- range $name := keys $model.partitions | sortAlpha }}
{{- if (get $model.partitions $name).byFeature }}
NodeSet=partition-{{ $name }} Feature=partition-{{ $name }}
{{- end }}
{{- end }}

# Partitions
{{- range $name := keys $model.partitions | sortAlpha }}
{{ (get $model.partitions $name).line }}
{{- end }}
{{- with $v.slurm.extraConfig }}

# slurm.extraConfig
{{ . | trimSuffix "\n" }}
{{- end }}
{{ end }}

{{/* cgroup.conf for slurm.cgroup: the chart's keys, overridden by slurm.cgroup.config. */}}
{{- define "slurm-cluster.cgroupConf" -}}
{{- $conf := dict
  "CgroupPlugin" "autodetect"
  "IgnoreSystemd" "yes"
  "ConstrainCores" "yes"
  "ConstrainRAMSpace" "yes"
  "ConstrainSwapSpace" "yes"
  "ConstrainDevices" "yes"
}}
{{- range $k, $val := .Values.slurm.cgroup.config }}
{{- if or (kindIs "invalid" $val) (eq (toString $val) "") }}
{{- $_ := unset $conf $k }}
{{- else }}
{{- $_ := set $conf $k (include "slurm-cluster.confValue" $val) }}
{{- end }}
{{- end -}}
# cgroup.conf rendered by the slurm-cluster chart ({{ .Release.Name }}); edit slurm.cgroup, not this file.
{{- range $k := keys $conf | sortAlpha }}
{{ $k }}={{ get $conf $k }}
{{- end }}
{{ end }}

{{/* The port slurmd listens on: SlurmdPort in the rendered slurm.conf (the last one counts);
none (slurm.config unsets it with null or ""): Slurm's default, 6818. The slurmd containers'
port named slurmd and the NetworkPolicy use it. */}}
{{- define "slurm-cluster.slurmdPort" -}}
{{- regexFindAll "(?mi)^[ \t]*SlurmdPort[ \t]*=[ \t]*[0-9]+" (include "slurm-cluster.slurmConf" .) -1 | default (list "SlurmdPort=6818") | last | regexFind "[0-9]+$" -}}
{{- end }}
