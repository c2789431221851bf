#!/usr/bin/env bash
# Records real slurmrestd v0.0.42 responses into tests/fixtures/<major.minor>/<case>.json
# (see tests/fixtures/README.md). Brings Slurm up first (hack/slurm-up.sh), then drives it with
# hack/record_fixtures.py (python3, stdlib only). Takes about 2 minutes (one case waits for a
# 1-minute time limit); --skip-timeout leaves that case out.
#
# Usage: hack/record-fixtures.sh [--flavour trixie|forky] [--fresh] [--skip-timeout] [--extra-only]
#   --fresh       restart Slurm with wiped controller state first (recommended; restarts the
#                 cluster, so do not use it while something else is using that Slurm)
#   --extra-only  record only the cases that need no particular cluster state (unsupported
#                 version, another data_parser, refused submit, /jobs/state/ with a held array)
#                 and keep the other fixtures: safe on a Slurm that others are using
set -euo pipefail
set +m
SLURM_LOG_TAG=record-fixtures
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
# shellcheck source=hack/lib/slurm-common.sh
source "$here/lib/slurm-common.sh"

slurm_parse_flavour "$@"
up_args=()
py_args=()
for a in ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}; do
    case "$a" in
        --fresh) up_args+=(--fresh) ;;
        --skip-timeout) py_args+=(--skip-timeout) ;;
        --extra-only) py_args+=(--extra-only) ;;
        -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument: $a" ;;
    esac
done
[[ $EUID -eq 0 ]] || die "must run as root"

bash "$here/slurm-up.sh" --flavour "$SLURM_FLAVOUR" ${up_args[@]+"${up_args[@]}"} >/dev/null
release=$(sed -n 's/^SLURM_RELEASE=//p' "$SLURM_ENV_FILE")
[[ "$release" =~ ^([0-9]+\.[0-9]+) ]] || die "cannot parse SLURM_RELEASE '$release'"
out=$repo/tests/fixtures/${BASH_REMATCH[1]}
log "recording Slurm $release ($SLURM_FLAVOUR) into $out"
python3 "$here/record_fixtures.py" --env "$SLURM_ENV_FILE" --out "$out" \
    --node-script "$here/slurm-node.sh" --flavour "$SLURM_FLAVOUR" ${py_args[@]+"${py_args[@]}"}
