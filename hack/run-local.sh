#!/usr/bin/env bash
# The main job on a local default: bring up the real local Slurm (hack/slurm-up.sh), check it
# with the operator's client, then run examples/hello-slurmjob.yaml through the operator's
# submit/mirror/cancel core (`slurm-operator job run`, no Kubernetes needed).
# Extra arguments are passed to `job run` (e.g. -f another-job.yaml, relative to where it is
# run from; without -f the example job is run with them).
set -euo pipefail
# Paths given (the job file, a tag key file, more clusters) are the caller's: made absolute
# before the cd to the repository.
args=()
job_file=false
while [ $# -gt 0 ]; do
    case $1 in
        -f | --filename | --tag-key-file | --cluster)
            case $1 in -f | --filename) job_file=true ;; esac
            args+=("$1")
            shift
            if [ $# -gt 0 ]; then
                args+=("$(realpath -m -- "$1")")
                shift
            fi
            ;;
        --filename=* | --tag-key-file=* | --cluster=*)
            case $1 in --filename=*) job_file=true ;; esac
            args+=("${1%%=*}=$(realpath -m -- "${1#*=}")")
            shift
            ;;
        -f?*)
            job_file=true
            value=${1#-f}
            value=${value#=}
            args+=("--filename=$(realpath -m -- "$value")")
            shift
            ;;
        *)
            args+=("$1")
            shift
            ;;
    esac
done
if [ -n "${SLURM_OPERATOR_TAG_KEY_FILE:-}" ]; then
    SLURM_OPERATOR_TAG_KEY_FILE=$(realpath -m -- "$SLURM_OPERATOR_TAG_KEY_FILE")
    export SLURM_OPERATOR_TAG_KEY_FILE
fi
cd "$(dirname "$0")/.."
flavour=${SLURM_FLAVOUR:-trixie}
bash hack/slurm-up.sh --flavour "$flavour" >/dev/null
# Where slurm-up.sh keeps its state ($SLURM_BASE): its own rule, from its library.
# shellcheck source=hack/lib/slurm-common.sh
source hack/lib/slurm-common.sh
# shellcheck disable=SC1090,SC1091
source "$SLURM_BASE/$flavour/env"

cargo build --quiet --locked
bin=${CARGO_TARGET_DIR:-target}/debug/slurm-operator
"$bin" check --url "$SLURM_REST_URL" --jwt-key "$SLURM_JWT_KEY" --user "$SLURM_USER"
echo

# The SlurmCluster as the platform admin would apply it to Kubernetes, with its JWT-key Secret
# (marked as credentials; the key is fresh on every cold start of the local Slurm, so the
# manifest is written each time). The local slurmrestd speaks plain http on 127.0.0.1.
cluster=$(mktemp --suffix=.yaml)
trap 'rm -f "$cluster"' EXIT
cat >"$cluster" <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: slurm-jwt
  labels:
    slurm.rs/credentials: "true"
type: Opaque
data:
  jwt_hs256.key: $(base64 -w0 "$SLURM_JWT_KEY")
---
apiVersion: slurm.rs/v1alpha1
kind: SlurmCluster
metadata:
  name: local
spec:
  endpoint: $SLURM_REST_URL
  allowInsecureHttp: true
  auth:
    jwt:
      keySecretRef:
        name: slurm-jwt
      user: $SLURM_USER
YAML
# The example job unless one was given (other options, such as --tag-key-file, keep it).
if ! $job_file; then
    args=(-f examples/hello-slurmjob.yaml "${args[@]}")
fi
"$bin" job run --cluster "$cluster" "${args[@]}"
