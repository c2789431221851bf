#!/usr/bin/env bash
# Regenerates the slurmrestd client from openapi/slurmrestd-v0.0.42.json with the generator in
# tools/gen-client: src/slurm/generated/slurmrestd_v0_0_42.rs (included by
# src/slurm/generated.rs) and, for review, the spec progenitor saw,
# openapi/processed/slurmrestd-v0.0.42.json. Both are committed; see openapi/README.md.
#
# Usage: hack/gen-client.sh [--check]
#
#   --check   only compare; exit 1 and name the stale files if the committed output differs
#             from what the spec and tools/gen-client generate
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
args=(--root "$repo")
while (($#)); do
    case "$1" in
        --check) args+=(--check) ;;
        -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "gen-client: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

cd "$repo"
cargo run --locked -q -p gen-client -- "${args[@]}"
