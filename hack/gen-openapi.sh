#!/usr/bin/env bash
# Regenerates the raw OpenAPI spec from the real slurmrestd in the debootstrap'ed root
# (built by the same code as hack/slurm-up.sh if absent; no daemon needs to run).
#
# Usage: hack/gen-openapi.sh [--flavour trixie|forky] [--all] [--data-parser v0.0.42]
#
#   trixie (Slurm 24.11, default) -> openapi/slurmrestd-<parser>.json   (v0.0.40, v0.0.41, v0.0.42)
#   forky  (Slurm 26.05)          -> openapi/slurmrestd-<parser>.json   (v0.0.43, v0.0.44, v0.0.45)
#                                    openapi/slurmrestd-26.05-<parser>.json (v0.0.42: a comparison
#                                    copy; each version's client is generated from one release)
#
# The spec is re-indented (2 spaces, `\/` unescaped, key order kept) for reviewable diffs.
# A sidecar <file>.provenance records the Slurm release, Debian package and command; files are
# left untouched when the spec did not change.
set -euo pipefail
set +m
SLURM_LOG_TAG=gen-openapi
# shellcheck source=hack/lib/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm-common.sh"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
slurm_parse_flavour "$@"
all=0
parser=v0.0.42
set -- ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}
while (($#)); do
    case "$1" in
        --all) all=1 ;;
        --data-parser) [[ $# -ge 2 ]] || die "--data-parser needs a value"; parser=$2; shift ;;
        -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
[[ $EUID -eq 0 ]] || die "must run as root (chroot)"

flavours=("$SLURM_FLAVOUR")
((all)) && flavours=(trixie forky)
mkdir -p "$repo/openapi"

for f in "${flavours[@]}"; do
    slurm_select_flavour "$f"
    (
        slurm_lock
        if ! slurm_root_ready; then
            slurm_ensure_root
            # Leave no mounts behind unless the cluster is running.
            slurm_pid_alive "$SLURM_STATE_DIR/slurmctld.pid" slurmctld || slurm_umount
        fi
        [[ -f "$SLURM_ROOT/etc/slurm/slurm.conf" ]] || slurm_write_conf
        release=$(slurm_release)
        # shellcheck disable=SC2016
        pkg=$(slurm_chroot dpkg-query -W -f '${Package} ${Version}' slurmrestd)
        if [[ "$f" == trixie || ! "$parser" =~ ^v0\.0\.4[0-2]$ ]]; then
            out=$repo/openapi/slurmrestd-$parser.json
        else
            out=$repo/openapi/slurmrestd-${release%.*}-$parser.json
        fi
        # shellcheck disable=SC2054
        cmd=(slurmrestd --generate-openapi-spec -s slurmctld,slurmdbd -d "$parser")
        raw=$(mktemp)
        trap 'rm -f "$raw" "$raw.pretty"' EXIT
        if ! slurm_chroot env SLURM_JWT=daemon "${cmd[@]}" >"$raw" 2>"$raw.err"; then
            cat "$raw.err" >&2
            rm -f "$raw.err"
            die "${cmd[*]} failed in the $f root"
        fi
        rm -f "$raw.err"
        python3 -c '
import json, sys
with open(sys.argv[1], encoding="utf-8") as fh:
    spec = json.load(fh)
with open(sys.argv[2], "w", encoding="utf-8") as fh:
    json.dump(spec, fh, indent=2, ensure_ascii=False)
    fh.write("\n")
print(len(spec.get("paths", {})), len(spec.get("components", {}).get("schemas", {})))
' "$raw" "$raw.pretty" >"$raw.counts"
        read -r npaths nschemas <"$raw.counts"
        rm -f "$raw.counts"
        sum=$(sha256sum "$raw.pretty" | cut -d' ' -f1)
        if [[ -f "$out" ]] && cmp -s "$raw.pretty" "$out" && [[ -f "${out%.json}.provenance" ]]; then
            log "$out unchanged (Slurm $release)"
        else
            mv "$raw.pretty" "$out"
            chmod 644 "$out"
            cat >"${out%.json}.provenance" <<PROV
# Provenance of $(basename "$out"), written by hack/gen-openapi.sh.
file=$(basename "$out")
command=${cmd[*]}
flavour=$f
debian_suite=$SLURM_SUITE
slurm_release=$release
debian_package=$pkg
data_parser=$parser
paths=$npaths
schemas=$nschemas
raw_bytes=$(stat -c %s "$raw")
sha256=$sum
generated=$(date -u +%Y-%m-%dT%H:%M:%SZ)
PROV
            log "wrote $out ($npaths paths, $nschemas schemas, Slurm $release)"
        fi
    )
done
