{{/*
Generated secrets that stay the same across upgrades.

"slurm-cluster.secretValue" (dict "ctx" . "name" NAME "key" KEY "generate" KIND "length" N)
returns the base64 value for data[KEY] of Secret NAME: the value the live Secret already has
(lookup), else a new random one. `helm template` and `--dry-run` (client) cannot look up, so
they always show a new value; `helm install`/`helm upgrade` reuse the live one.

"slurm-cluster.secretValueFrom" is the pure part (no lookup): it takes the looked-up Secret as
`existing`, so hack/helm-test.sh can test it with a fake Secret.
  KIND bytes: N random bytes (keys). KIND alnum: N random letters and digits (passwords).
*/}}
{{- define "slurm-cluster.secretValue" -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .name | default dict }}
{{- include "slurm-cluster.secretValueFrom" (dict "existing" $existing "key" .key "generate" .generate "length" .length) }}
{{- end }}

{{- define "slurm-cluster.secretValueFrom" -}}
{{- $old := dig "data" .key "" (default dict .existing) }}
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
