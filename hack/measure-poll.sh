#!/usr/bin/env bash
# Measures what one job-poll cycle costs slurmrestd (requests, response bytes, latency) for the
# candidate polling strategies, at several job counts, on the local Slurm of hack/slurm-up.sh.
# Submits cheap batch jobs held by a begin time an hour ahead (they never run) and cancels them
# at the end. See hack/measure_poll.py for the strategies. Takes about a minute for 5000 jobs.
#
# Usage: hack/measure-poll.sh [--flavour trixie|forky] [--keep] [--cancel NAME] [COUNT...]
#   COUNT   job counts to measure at, cumulative (default: 10 1000 5000; MaxJobCount is 10000)
#   --keep  leave the jobs in place (for further measurements); --cancel NAME removes them
set -euo pipefail
set +m
SLURM_LOG_TAG=measure-poll
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib/slurm-common.sh
source "$here/lib/slurm-common.sh"

slurm_parse_flavour "$@"
[[ -r "$SLURM_ENV_FILE" ]] || die "no $SLURM_ENV_FILE: run hack/slurm-up.sh first"
key=$(sed -n 's/^SLURM_JWT_KEY=//p' "$SLURM_ENV_FILE")
partition=$(sed -n 's/^SLURM_PARTITION=//p' "$SLURM_ENV_FILE")
exec python3 "$here/measure_poll.py" --url "$SLURM_REST_URL" --key "$key" \
    --partition "${partition:-debug}" ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}
