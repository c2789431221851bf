#!/usr/bin/env bash
# Benchmarks against the real local Slurm, in one run (issue 7): submit throughput through the
# operator's submit path vs bare REST submits, status latency (Slurm-side change -> SlurmJob
# status), slurmrestd requests per poll cycle at 10 / 1 000 / 10 000 jobs (others' held jobs; the
# size of one full state listing next to them; the largest point again once the operator's own
# pending jobs are cancelled (ended: no longer followed, still listed) and once they are
# purged), a restarted poller's first sync against those 10 000 jobs (skipping them, and, as
# before issue 19, fetching every record), the memory of an index with
# 10 000 jobs and 1 000 nodes, and the memory of the operator binary with 100 000 SlurmJobs in its
# caches (against the tests' in-memory API server) and 100 000 others' jobs queued, and (issue 19)
# through the operator binary and that API server: bursts of 200 and 2 000 SlurmJobs (how long after
# the last was created the last was submitted, bare REST submits beside; 2 000 again created at
# kubectl's rate on a real API server), the API writes per SlurmJob, and status latency from an
# external cancel to the phase read back; and the poller's node list while 1 000 extra nodes keep
# changing (paced, and asked every cycle as before). The measuring code is examples/bench.rs (its
# module docs say what each number covers). Measures, never asserts: it prints a Markdown table and
# writes it to target/bench/bench-<UTC time>.md (and target/bench/latest.md).
#
# Usage: hack/bench.sh [--flavour trixie|forky] [--fresh] [BENCH ARGS...]
#   --fresh     restart that flavour's Slurm cold first (hack/slurm-up.sh --fresh): an empty slurmctld
#   BENCH ARGS  passed to `bench slurm`, e.g. --jobs 300 --concurrency 1,4,8 --tracked 10,1000
#   BENCH_BURST_ARGS   passed to `bench burst`, e.g. "--bursts 200 --debounce 50ms --concurrency 32"
#   BENCH_PROFILE=dev  build the bench and the operator with the dev profile (default: release,
#                      as the operator ships; a first release build, with LTO, takes ~45 min on 2 cores)
#
# Brings the local Slurm up (hack/slurm-up.sh, idempotent) and leaves it up. Every job it submits
# is held (begin time a day ahead: nothing runs) and named "<run>-..."; all of them are cancelled
# at the end, also on failure or Ctrl-C. The 100 000-job point needs MaxJobCount above 100 000
# (hack/lib/slurm-common.sh sets 150 000). About 15 minutes on 2 cores.
set -euo pipefail
set +m
SLURM_LOG_TAG=bench
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib/slurm-common.sh
source "$here/lib/slurm-common.sh"

slurm_parse_flavour "$@"
cd "$repo"
# --fresh: restart this flavour's Slurm cold first (empties slurmctld's jobs, so that the
# 10-job point really has 10; other users of that flavour lose their jobs).
up_args=()
bench_args=()
for arg in ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}; do
    if [[ "$arg" == --fresh ]]; then up_args+=(--fresh); else bench_args+=("$arg"); fi
done

profile=${BENCH_PROFILE:-release}
case "$profile" in
    dev) profile_dir=debug ;;
    release) profile_dir=release ;;
    *) die "BENCH_PROFILE must be dev or release" ;;
esac
log "building examples/bench.rs ($profile profile)"
cargo build --quiet --profile "$profile" --example bench --bin slurm-operator
bin=$repo/target/$profile_dir/examples/bench
operator_bin=$repo/target/$profile_dir/slurm-operator

bash "$here/slurm-up.sh" --flavour "$SLURM_FLAVOUR" ${up_args[@]+"${up_args[@]}"} >/dev/null
[[ -r "$SLURM_ENV_FILE" ]] || die "no $SLURM_ENV_FILE after slurm-up.sh"

run=bench-$(date -u +%Y%m%d%H%M%S)
cleanup() {
    # Every job of this run still in slurmctld, by name prefix (held ones never started).
    local ids
    ids=$(chroot "$SLURM_ROOT" squeue -h -o '%i %j' 2>/dev/null |
        awk -v p="$run-" 'index($2, p) == 1 { print $1 }') || true
    if [[ -n "$ids" ]]; then
        log "cancelling $(wc -l <<<"$ids") jobs of $run"
        xargs -r chroot "$SLURM_ROOT" scancel <<<"$ids" || log "scancel failed: cancel jobs named $run-* by hand"
    fi
}
trap cleanup EXIT

out_dir=$repo/target/bench
mkdir -p "$out_dir"
out=$out_dir/$run.md
cpus=$(nproc)
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
mem=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
release=$(sed -n 's/^SLURM_RELEASE=//p' "$SLURM_ENV_FILE")

log "memory (synthetic index, own process)"
memory_rows=$("$bin" memory)
log "memory of the operator binary (100 000 SlurmJobs and 100 000 others' jobs queued, in-memory API server)"
operator_rows=$("$bin" operator --env-file "$SLURM_ENV_FILE" --binary "$operator_bin" --run "$run")
log "Slurm $release ($SLURM_FLAVOUR): throughput, latency, request cost (run $run)"
slurm_rows=$("$bin" slurm --env-file "$SLURM_ENV_FILE" --run "$run" ${bench_args[@]+"${bench_args[@]}"})
log "the node list while 1 000 extra nodes keep changing (paced, and asked every cycle)"
nodes_rows=$("$bin" nodes --env-file "$SLURM_ENV_FILE")
log "bursts of 200 and 2 000 SlurmJobs, API writes, status latency (the operator binary, in-memory API server)"
burst_rows=$("$bin" burst --env-file "$SLURM_ENV_FILE" --binary "$operator_bin" --run "$run" ${BENCH_BURST_ARGS:-})
log "a burst of 2 000 SlurmJobs created at 45.5/s (kubectl's rate on a real API server in issue 19)"
paced_rows=$("$bin" burst --env-file "$SLURM_ENV_FILE" --binary "$operator_bin" --run "$run-paced" \
    --bursts 2000 --cancels 0 --create-rate 45.5 | grep '^| burst: ')

{
    printf '%s, %s cores (%s), %s RAM; Slurm %s (%s flavour) on the same machine; bench built with the %s profile.\n\n' \
        "$(date -u +%Y-%m-%d)" "$cpus" "${model:-unknown CPU}" "$mem" "$release" "$SLURM_FLAVOUR" "$profile"
    printf '| measurement | result | how |\n|---|---|---|\n'
    printf '%s\n' "$slurm_rows" "$nodes_rows" "$burst_rows" "$paced_rows" "$memory_rows" "$operator_rows"
} >"$out"
cp "$out" "$out_dir/latest.md"
echo
cat "$out"
log "written to ${out#"$repo"/}"
