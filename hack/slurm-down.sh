#!/usr/bin/env bash
# Stops the Slurm started by hack/slurm-up.sh (and the dynamic nodes of hack/slurm-node.sh, and
# the accounting's slurmdbd and mariadbd) and unmounts /proc, /sys and /dev from its root. The
# cached root filesystem (with the accounting database) is kept.
#
# Usage: hack/slurm-down.sh [--flavour trixie|forky] [--all]
#
# Only processes started by these scripts are signalled: PIDs from the state dir's PID files
# (falling back to the daemons' own pid files in the root), checked to be Slurm daemons running
# inside this root, then whatever still runs inside the root (slurmstepd and job processes).
# SIGTERM to all Slurm daemons at once, SIGKILL to stragglers after a few seconds (SLURM_STOP_WAIT,
# default 6); mariadbd last, once they are gone (SIGKILL after SLURM_DB_STOP_WAIT, default 20).
set -euo pipefail
set +m
SLURM_LOG_TAG=slurm-down
# shellcheck source=hack/lib/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm-common.sh"

slurm_parse_flavour "$@"
all=0
for a in ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}; do
    case "$a" in
        --all) all=1 ;;
        -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument: $a" ;;
    esac
done
[[ $EUID -eq 0 ]] || die "must run as root"

flavours=("$SLURM_FLAVOUR")
((all)) && flavours=(trixie forky)
for f in "${flavours[@]}"; do
    slurm_select_flavour "$f"
    [[ -d "$SLURM_FLAVOUR_DIR" ]] || continue
    (
        slurm_lock
        t0=$SECONDS
        slurm_stop_all
        rm -f "$SLURM_ENV_FILE"
        log "$SLURM_FLAVOUR stopped ($((SECONDS - t0)) s)"
    )
done
