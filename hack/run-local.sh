#!/usr/bin/env bash
# The main job on a local default: bring up the real local Slurm (hack/slurm-up.sh) and run the
# operator's `check` against it.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${SLURM_FLAVOUR:-trixie}
bash hack/slurm-up.sh --flavour "$flavour" >/dev/null
env_file=/var/tmp/slurm-operator/$flavour/env
[ -r "$env_file" ] || env_file=${TMPDIR:-/tmp}/slurm-operator/$flavour/env
# shellcheck disable=SC1090
source "$env_file"
cargo run --quiet --locked -- check --url "$SLURM_REST_URL" --jwt-key "$SLURM_JWT_KEY" --user "$SLURM_USER"
