{{/*
Generated secrets that stay the same across upgrades.

"slurm-cluster.secretValue" (dict "ctx" . "name" NAME "key" KEY "generate" KIND "length" N)
returns the base64 value for data[KEY] of Secret NAME: the value the live Secret already has
(lookup), else a new random one. `helm template` and `--dry-run` (client) cannot look up, so
they always show a new value; `helm install`/`helm upgrade` reuse the live one.

"slurm-cluster.secretValueFrom" is the pure part (no lookup): it takes the looked-up Secret as
`existing`, so hack/helm-test.sh can test it with a fake Secret.
  KIND bytes: N random bytes (keys). KIND alnum: N random letters and digits (passwords).
  "only" VALUE (optional): the Secret holds this one key, whose name the value VALUE sets. A live
  Secret holding another name means VALUE was changed: that fails, naming it, rather than make a
  new key that the running daemons do not have (nothing restarts them for it).
*/}}
{{- define "slurm-cluster.secretValue" -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .name | default dict }}
{{- include "slurm-cluster.secretValueFrom" (dict "existing" $existing "key" .key "generate" .generate "length" .length "only" .only "name" .name) }}
{{- end }}

{{- define "slurm-cluster.secretValueFrom" -}}
{{- $data := dig "data" dict (default dict .existing) }}
{{- $old := dig "data" .key "" (default dict .existing) }}
{{- if and .only (not $old) $data }}
{{- fail (printf "%s is %q, but the live Secret %s holds %s: changing it would make a new key that the running slurmctld, slurmdbd and slurmd do not have. Set %s back, or to rotate the key delete that Secret first and restart the Slurm daemons" .only .key (default "its Secret" .name) (keys $data | sortAlpha | join ", ") .only) }}
{{- end }}
{{- if $old }}
{{- $old }}
{{- else if eq .generate "bytes" }}
{{- randBytes (int .length) }}
{{- else if eq .generate "alnum" }}
{{- randAlphaNum (int .length) | b64enc }}
{{- else }}
{{- fail (printf "slurm-cluster.secretValueFrom: unknown generate %q" .generate) }}
{{- end }}
{{- end }}
