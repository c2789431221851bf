#!/usr/bin/env bash
# Regenerates crds/*.yaml (one file per CRD, <plural>.<group>.yaml) from the Rust types in
# src/crd/, through `slurm-operator crd --out-dir`. The unit test `committed_crds_are_current`
# fails while the committed files differ from what the types generate.
#
# Usage: hack/gen-crds.sh [--check]
#
#   --check   only compare; exit 1 and list the stale files if crds/ is out of date
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
(cd "$repo" && cargo run --quiet --bin slurm-operator -- crd --out-dir "$out")
compgen -G "$out/*.yaml" >/dev/null || { echo "gen-crds: no CRDs were generated" >&2; exit 1; }

if ((check)); then
    if ! diff -r -q "$out" "$repo/crds" --exclude='*.md'; then
        echo "gen-crds: crds/ is stale: run hack/gen-crds.sh" >&2
        exit 1
    fi
    echo "gen-crds: crds/ is up to date"
    exit 0
fi

# crds/ holds exactly the generated files: a removed CRD's file goes too.
mkdir -p "$repo/crds"
rm -f "$repo"/crds/*.yaml
cp "$out"/*.yaml "$repo/crds/"
for f in "$repo"/crds/*.yaml; do
    echo "gen-crds: wrote crds/$(basename "$f") ($(wc -c <"$f") bytes)"
done
