{{/*
The cluster's shape, computed once from values and checked: every template that needs NodeSets
or partitions reads this (include "slurm-cluster.model" . | fromYaml), so slurm.conf, the
SlurmNodeSet objects and the slurmd command line cannot disagree.

  nodesets.<name>: the entry over nodesetDefaults ("slurm-cluster.overlay": a set's 0, false,
              "" or [] is its own, not the default's), plus
      features    the set's name first (slurm.conf `NodeSet=<name> Feature=<name>` selects
                  the set's nodes by it), then the configured features
      partitions  default: [the default partition]
      cpus        default: resources.limits.cpu when it is a whole number
      realMemory  default: resources.limits.memory; realMemoryMiB is it in MiB for slurmd
      conf        the `slurmd -Z --conf` string (Features, Gres, CPUs, RealMemory, Weight)
      autoscaled  autoscaling.enabled: the chart writes no replicas (an autoscaler's)
  totalReplicas: the nodes the sets may have at once (an autoscaled set counts its maxReplicas)
  partitions.<name>.line: the PartitionName= line
  gresTypes: GresTypes from every set's gres
*/}}
{{- define "slurm-cluster.model" -}}
{{- $v := .Values }}
{{- $defaults := list }}
{{- range $name, $p := $v.partitions }}
{{- if $p.default }}{{ $defaults = append $defaults $name }}{{ end }}
{{- end }}
{{- if gt (len $defaults) 1 }}
{{- fail (printf "partitions: %s are all default: true; Slurm takes one default partition (your partitions are merged with the chart's: drop its default with partitions.debug: null)" (join ", " $defaults)) }}
{{- end }}
{{- $defaultPartition := "" }}
{{- if $defaults }}{{ $defaultPartition = first $defaults }}{{ end }}
{{- $nodesets := dict }}
{{- $gresTypes := list }}
{{- $total := 0 }}
{{- range $name, $entry := $v.nodesets }}
{{- $ns := deepCopy (default dict $v.nodesetDefaults) }}
{{- $_ := include "slurm-cluster.overlay" (dict "into" $ns "from" (deepCopy (default dict $entry))) }}
{{- $_ := set $ns "objectName" (printf "%s-%s" (include "slurm-cluster.fullname" $) $name) }}
{{- if gt (len $ns.objectName) 46 }}
{{- fail (printf "nodesets.%s: the SlurmNodeSet name %q is longer than 46 characters (its pods and Slurm nodes are <name>-<namespace tag>-<ordinal>, a DNS label): use a shorter release or NodeSet name" $name $ns.objectName) }}
{{- end }}
{{- with dig "scaleIn" "drainTimeout" "" $ns }}
{{- $key := ternary (printf "nodesets.%s.scaleIn.drainTimeout" $name) "nodesetDefaults.scaleIn.drainTimeout" (ne (dig "scaleIn" "drainTimeout" "" (default dict $entry)) "") }}
{{- include "slurm-cluster.checkDrainTimeout" (dict "key" $key "value" .) }}
{{- end }}
{{- $features := list $name }}
{{- range $ns.features }}{{ if ne . $name }}{{ $features = append $features . }}{{ end }}{{ end }}
{{- $_ := set $ns "features" $features }}
{{- if not (hasKey $ns "partitions") }}
{{- $_ := set $ns "partitions" (ternary (list $defaultPartition) list (ne $defaultPartition "")) }}
{{- end }}
{{- range $ns.partitions }}
{{- if not (hasKey $v.partitions .) }}
{{- fail (printf "nodesets.%s.partitions names partition %q, which is not in .Values.partitions (have: %s)" $name . (keys $v.partitions | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}
{{- $limits := default dict (default dict $ns.resources).limits }}
{{- if and (not $ns.cpus) $limits.cpu (regexMatch "^[0-9]+$" (toString $limits.cpu)) }}
{{- $_ := set $ns "cpus" (toString $limits.cpu | int) }}
{{- end }}
{{- if and (not $ns.realMemory) $limits.memory }}
{{- $_ := set $ns "realMemory" (ternary (int64 $limits.memory | toString) (toString $limits.memory) (kindIs "float64" $limits.memory)) }}
{{- end }}
{{- $conf := list (printf "Features=%s" (join "," $ns.features)) }}
{{- if $ns.gres }}
{{- $conf = append $conf (printf "Gres=%s" $ns.gres) }}
{{- range splitList "," $ns.gres }}
{{- $t := first (splitList ":" (trim .)) }}
{{- if not (has $t $gresTypes) }}{{ $gresTypes = append $gresTypes $t }}{{ end }}
{{- end }}
{{- end }}
{{- if $ns.cpus }}{{ $conf = append $conf (printf "CPUs=%d" (int $ns.cpus)) }}{{ end }}
{{- if kindIs "float64" $ns.realMemory }}{{ $_ := set $ns "realMemory" (int64 $ns.realMemory | toString) }}{{ end }}
{{- if $ns.realMemory }}
{{- $mib := include "slurm-cluster.mebibytes" $ns.realMemory }}
{{- if lt (int64 $mib) 1 }}{{ fail (printf "nodesets.%s.realMemory %v is less than 1 MiB" $name $ns.realMemory) }}{{ end }}
{{- $_ := set $ns "realMemoryMiB" (int64 $mib) }}
{{- $conf = append $conf (printf "RealMemory=%s" $mib) }}
{{- end }}
{{- if not (kindIs "invalid" $ns.weight) }}{{ $conf = append $conf (printf "Weight=%d" (int $ns.weight)) }}{{ end }}
{{- $_ := set $ns "conf" (join " " $conf) }}
{{- $_ := set $ns "autoscaled" (dig "autoscaling" "enabled" false $ns) }}
{{- if $ns.autoscaled }}
{{- $max := dig "autoscaling" "maxReplicas" 0 $ns | int }}
{{- if lt $max 1 }}
{{- fail (printf "nodesets.%s.autoscaling.maxReplicas: set it (at least 1) when autoscaling.enabled is true: it is the most nodes the autoscaler may ask for, counted against slurm.maxNodeCount" $name) }}
{{- end }}
{{- $total = add $total $max }}
{{- else }}
{{- $total = add $total (int $ns.replicas) }}
{{- end }}
{{- $_ := set $nodesets $name $ns }}
{{- end }}
{{- if gt (int $total) (int $v.slurm.maxNodeCount) }}
{{- fail (printf "the NodeSets ask for %d nodes in all (replicas, or autoscaling.maxReplicas of an autoscaled set), more than slurm.maxNodeCount (%d): raise slurm.maxNodeCount (it bounds Slurm's dynamic nodes)" (int $total) (int $v.slurm.maxNodeCount)) }}
{{- end }}
{{- $partitions := dict }}
{{- range $pname, $p := $v.partitions }}
{{- $p = default dict $p }}
{{- $nodes := list }}
{{- if $p.allNodes }}
{{- $nodes = list "ALL" }}
{{- else if hasKey $p "nodesets" }}
{{- range $p.nodesets }}
{{- if not (hasKey $nodesets .) }}
{{- fail (printf "partitions.%s.nodesets names NodeSet %q, which is not in .Values.nodesets (have: %s)" $pname . (keys $nodesets | sortAlpha | join ", ")) }}
{{- end }}
{{- $nodes = append $nodes . }}
{{- end }}
{{- /* A set whose partitions name this one must be in the list: its SlurmNodeSet expects its
nodes there (spec.slurm.partitions) and would report them outside it for good. */}}
{{- range $nsName := keys $nodesets | sortAlpha }}
{{- if and (has $pname (get $nodesets $nsName).partitions) (not (has $nsName $p.nodesets)) }}
{{- fail (printf "partitions.%s.nodesets leaves out NodeSet %q, whose partitions (nodesets.%s.partitions, or the default partition when it names none) include %q: its nodes would join no such partition. Add it to partitions.%s.nodesets, or set nodesets.%s.partitions" $pname $nsName $nsName $pname $pname $nsName) }}
{{- end }}
{{- end }}
{{- else }}
{{- range $nsName := keys $nodesets | sortAlpha }}
{{- if has $pname (get $nodesets $nsName).partitions }}{{ $nodes = append $nodes $nsName }}{{ end }}
{{- end }}
{{- end }}
{{- /* SlurmNodeSets of cluster.nodeSetNamespaces are not the chart's: their nodes carry the
feature partition-<name> of each partition they ask for (the operator adds it), selected here by
a NodeSet of that feature, so that they can join the chart's partitions. */}}
{{- $byFeature := and (without (default list $v.cluster.nodeSetNamespaces) $.Release.Namespace) (not $p.allNodes) }}
{{- if $byFeature }}
{{- if hasKey $nodesets (printf "partition-%s" $pname) }}
{{- fail (printf "nodesets.partition-%s: the chart names a NodeSet partition-%s for the SlurmNodeSets of cluster.nodeSetNamespaces that ask for partition %s: give the set another name" $pname $pname $pname) }}
{{- end }}
{{- $nodes = append $nodes (printf "partition-%s" $pname) }}
{{- end }}
{{- $line := list (printf "PartitionName=%s" $pname) }}
{{- if $nodes }}{{ $line = append $line (printf "Nodes=%s" (join "," $nodes)) }}{{ end }}
{{- if $p.default }}{{ $line = append $line "Default=YES" }}{{ end }}
{{- $line = append $line (printf "MaxTime=%s" (toString (default "INFINITE" $p.maxTime))) }}
{{- $line = append $line (printf "State=%s" (default "UP" $p.state)) }}
{{- /* An option replaces the chart's key of that name (slurm.conf keys are case-insensitive), and
"" or null removes it (a key an earlier values file set, or the chart's MaxTime/State). */}}
{{- range $k, $val := default dict $p.options }}
{{- if has (lower $k) (list "partitionname" "nodes") }}
{{- fail (printf "partitions.%s.options.%s: the chart writes the partition's %s (from its name, and nodesets or allNodes): set those instead" $pname $k $k) }}
{{- end }}
{{- $kept := list }}
{{- range $line }}{{ if ne (lower (first (splitList "=" .))) (lower $k) }}{{ $kept = append $kept . }}{{ end }}{{ end }}
{{- $line = $kept }}
{{- if not (or (kindIs "invalid" $val) (eq (toString $val) "")) }}{{ $line = append $line (printf "%s=%s" $k (include "slurm-cluster.confValue" $val)) }}{{ end }}
{{- end }}
{{- $_ := set $partitions $pname (dict "line" (join " " $line) "nodes" $nodes "byFeature" $byFeature) }}
{{- end }}
defaultPartition: {{ $defaultPartition | quote }}
totalReplicas: {{ $total }}
gresTypes: {{ toJson $gresTypes }}
nodesets: {{ toJson $nodesets }}
partitions: {{ toJson $partitions }}
{{- end }}

{{/*
"slurm-cluster.overlay" (dict "into" $base "from" $over): writes every key of $over into $base
(in place), maps key by key, anything else as it is, a null not at all (the base's stays).
Sprig's merge would not do: it takes a 0, false, "" or [] of the map merged into for unset and
fills it from the other, so a set's `replicas: 0` became nodesetDefaults' 1.
*/}}
{{- define "slurm-cluster.overlay" -}}
{{- $into := .into }}
{{- range $k, $x := .from }}
{{- if and (kindIs "map" $x) (kindIs "map" (get $into $k)) }}
{{- $_ := include "slurm-cluster.overlay" (dict "into" (get $into $k) "from" $x) }}
{{- else if not (kindIs "invalid" $x) }}
{{- $_ := set $into $k $x }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"slurm-cluster.checkDuration" (dict "value" "1h" "min" "30s" "max" "15m" "message" "..."): fails
with the message unless the duration parses and lies within min (optional) and max, as the
CRDs' CEL rules (`duration(self) <= duration('15m')`) check it on the server: a schema pattern
cannot add up "8000h760h1m", and the API server refusing a custom resource, applied last, leaves
a release half-applied. dateModify parses with Go's time.ParseDuration, as CEL's duration()
does, and gives the date back unchanged when it cannot (an overflow): with 1ns appended, a
duration D moves the date by D+1ns, never 0, unless it does not parse.
*/}}
{{- define "slurm-cluster.checkDuration" -}}
{{- $base := toDate "2006-01-02" "2000-01-01" }}
{{- $moved := dateModify (printf "%s1ns" .value) $base }}
{{- $short := and .min ($moved.Before (dateModify (printf "%s1ns" (default "0s" .min)) $base)) }}
{{- if or ($moved.Equal $base) $short ($moved.After (dateModify (printf "%s1ns" .max) $base)) }}
{{- fail .message }}
{{- end }}
{{- end }}

{{/* "slurm-cluster.checkDrainTimeout" (dict "key" "nodesets.x.scaleIn.drainTimeout" "value"
"1h"): at most 8760h, the SlurmNodeSet CRD's rule. */}}
{{- define "slurm-cluster.checkDrainTimeout" -}}
{{- include "slurm-cluster.checkDuration" (dict "value" .value "max" "8760h" "message" (printf "%s: %s is more than 8760h (a year), the most a SlurmNodeSet's scaleIn.drainTimeout may be; leave it unset to wait as long as it takes" .key .value)) }}
{{- end }}
