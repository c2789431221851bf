#!/usr/bin/env bash
# Regenerates crds/*.yaml (one file per CRD, <plural>.<group>.yaml) from the Rust types in
# src/crd/, through `slurm-operator crd --out-dir`, and the same files into the operator chart
# (helm/slurm-operator/files/crds/, which its templates install). The unit test
# `committed_crds_are_current` fails while crds/ differs from what the types generate;
# hack/helm-test.sh fails while the chart's copy differs from crds/.
#
# Usage: hack/gen-crds.sh [--check]
#
#   --check   only compare; exit 1 and list the stale files if crds/ or the chart's copy is
#             out of date
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
check=0
while (($#)); do
    case "$1" in
        --check) check=1 ;;
        -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "gen-crds: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$repo" && cargo run --locked --quiet --bin slurm-operator -- crd --out-dir "$out")
compgen -G "$out/*.yaml" >/dev/null || { echo "gen-crds: no CRDs were generated" >&2; exit 1; }

# Every directory that holds a copy of the generated CRDs.
targets=(crds helm/slurm-operator/files/crds)

if ((check)); then
    stale=0
    for t in "${targets[@]}"; do
        if ! diff -r -q "$out" "$repo/$t" --exclude='*.md'; then
            echo "gen-crds: $t/ is stale: run hack/gen-crds.sh" >&2
            stale=1
        fi
    done
    if ((stale)); then exit 1; fi
    echo "gen-crds: ${targets[*]/%//} are up to date"
    exit 0
fi

# Each target holds exactly the generated files: a removed CRD's file goes too.
for t in "${targets[@]}"; do
    mkdir -p "$repo/$t"
    rm -f "$repo/$t"/*.yaml
    cp "$out"/*.yaml "$repo/$t/"
    for f in "$repo/$t"/*.yaml; do
        echo "gen-crds: wrote $t/$(basename "$f") ($(wc -c <"$f") bytes)"
    done
done
