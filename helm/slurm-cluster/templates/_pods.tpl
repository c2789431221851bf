{{/* Pieces shared by the pod templates. */}}

{{/* Projected volume "slurm-keys" with slurm.key and (jwt: true) jwt_hs256.key, under fixed
file names whatever the keys in the Secrets are called. Mode 0440: readable by root and by
the pod's fsGroup (the SlurmUser's group), which the init container copies them as. */}}
{{- define "slurm-cluster.keysVolume" -}}
- name: slurm-keys
  projected:
    defaultMode: 0440
    sources:
      - secret:
          name: {{ include "slurm-cluster.slurmKey.secret" .ctx }}
          items:
            - key: {{ .ctx.Values.secrets.slurmKey.key }}
              path: slurm.key
      {{- if .jwt }}
      - secret:
          name: {{ include "slurm-cluster.jwtKey.secret" .ctx }}
          items:
            - key: {{ .ctx.Values.secrets.jwtKey.key }}
              path: jwt_hs256.key
      {{- end }}
{{- end }}

{{/* Init container that assembles /etc/slurm (an emptyDir) from the mounted config files
(0644) and keys (0600, owned by the user it runs as). Slurm wants its keys private to their
owner, which a Secret volume alone cannot give a non-root user.
(dict "ctx" . "image" IMG "conf" true|false "extra" "shell lines" "securityContext" {...}) */}}
{{- define "slurm-cluster.initConfig" -}}
- name: init-config
  image: {{ include "slurm-cluster.image" (dict "image" .image) | quote }}
  imagePullPolicy: {{ include "slurm-cluster.pullPolicy" (dict "ctx" .ctx "image" .image) }}
  command:
    - sh
    - -ec
    - |
      {{- if .conf }}
      for f in /mnt/slurm-conf/*; do install -m 0644 "$f" /etc/slurm/; done
      {{- end }}
      for f in /mnt/slurm-keys/*; do install -m 0600 "$f" /etc/slurm/; done
      {{- with .extra }}
      {{- . | nindent 6 }}
      {{- end }}
      ls -l /etc/slurm
  {{- with .env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      memory: 64Mi
  volumeMounts:
    - name: etc-slurm
      mountPath: /etc/slurm
    - name: slurm-keys
      mountPath: /mnt/slurm-keys
      readOnly: true
    {{- if .conf }}
    - name: slurm-conf
      mountPath: /mnt/slurm-conf
      readOnly: true
    {{- end }}
    {{- with .extraMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* Pod security context for daemons that run as the SlurmUser. */}}
{{- define "slurm-cluster.slurmUserPodSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.slurm.uid }}
runAsGroup: {{ .Values.slurm.gid }}
fsGroup: {{ .Values.slurm.gid }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The shared volume (sharedVolume.*) as a pod volume named "shared". */}}
{{- define "slurm-cluster.sharedVolume" -}}
{{- $s := .Values.sharedVolume }}
- name: shared
  {{- if $s.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ $s.existingClaim }}
  {{- else if $s.nfs.server }}
  nfs:
    server: {{ $s.nfs.server }}
    path: {{ $s.nfs.path }}
  {{- else }}
  persistentVolumeClaim:
    claimName: {{ include "slurm-cluster.fullname" . }}-shared
  {{- end }}
{{- end }}
