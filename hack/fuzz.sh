#!/usr/bin/env bash
# Fuzz the slurmrestd response decoding and the state mappings (fuzz/: cargo-fuzz + libFuzzer).
#
#   hack/fuzz.sh [--time S] [TARGET...]    each target for S seconds (default 60);
#                                          targets: response state_mapping (default: both)
#
# fuzz/corpus/response/ is seeded from the recorded answers in tests/fixtures; the corpora grow
# in fuzz/corpus/<target>/ (git-ignored). A crash ends that target's run; the script goes on and
# exits non-zero, naming the reproducer (fuzz/artifacts/<target>/crash-*). Once fixed, minimize
# it (`<binary> -minimize_crash=1 -runs=20000 -exact_artifact_path=OUT crash-*`) and commit it under
# fuzz/regressions/<target>/: tests/fuzz_corpus.rs replays those (and any local corpus) in every
# `cargo test`.
# Environment: FUZZ_SANITIZER (default none), FUZZ_JOBS (libFuzzer -fork workers, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

time=60
targets=()
while [ $# -gt 0 ]; do
    case $1 in
        --time) time=${2:?--time needs seconds}; shift 2 ;;
        --time=*) time=${1#*=}; shift ;;
        -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
        -*) echo "unknown option: $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=(response state_mapping)

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

# cargo-fuzz asks for nightly-only options as soon as a sanitizer is on (`-Zsanitizer=address`,
# `-Zbuild-std` for memory); this machine has the stable toolchain only. RUSTC_BOOTSTRAP=1 makes
# stable rustc and cargo accept them (for these commands only), so FUZZ_SANITIZER=address works.
export RUSTC_BOOTSTRAP=1
# No AddressSanitizer by default: the code under test is safe Rust (unsafe_code = forbid), the
# findings are panics (which libFuzzer sees as crashes either way), and ASan slows every run.
sanitizer=${FUZZ_SANITIZER:-none}
# A shared 2-core machine: build and fuzz at low priority.
nice_run() { nice -n 15 "$@"; }

seed_response() {
    # One seed per recorded answer: a header byte naming the call and the status class (as
    # `header()` in fuzz/src/lib.rs reads it), then the body as slurmrestd sent it. Plus
    # slurmdbd-shaped accounting answers made from the recorded job records (none are recorded).
    local out=fuzz/corpus/response
    mkdir -p "$out"
    python3 - "$out" <<'PY'
import json, pathlib, re, sys

out = pathlib.Path(sys.argv[1])
# Endpoint::ALL in src/slurm/fuzzing.rs, in order.
ENDPOINTS = ["ping", "diag", "nodes", "node", "node_update", "partitions", "submit", "job",
             "jobs", "jobs_state", "cancel", "accounting"]
STATUS_CLASSES = 2  # STATUSES in fuzz/src/lib.rs: [200, 500]

def endpoint(method, path):
    path = re.sub(r"^/slurm(db)?/v[0-9.]+/", "", path)
    table = [("GET", r"ping/?", "ping"), ("GET", r"diag/?", "diag"), ("GET", r"nodes/?", "nodes"),
             ("GET", r"node/.+", "node"), ("POST", r"node/.+", "node_update"),
             ("DELETE", r"node/.+", "node_update"), ("GET", r"partitions/?", "partitions"),
             ("POST", r"job/submit", "submit"), ("GET", r"jobs/state/?", "jobs_state"),
             ("GET", r"jobs/?", "jobs"), ("GET", r"job/.+", "job"), ("DELETE", r"job/.+", "cancel")]
    for m, pattern, name in table:
        if m == method and re.fullmatch(pattern, path):
            return name
    return None

def seed(name, call, status, body):
    index = ENDPOINTS.index(call) + len(ENDPOINTS) * (0 if 200 <= status < 300 else 1)
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    (out / name).write_bytes(bytes([index]) + data)

def number(value):
    return value.get("number") if isinstance(value, dict) else value

def accounting(record):
    return {
        "job_id": record.get("job_id"), "name": record.get("name"),
        "state": {"current": record.get("job_state", []), "reason": record.get("state_reason")},
        "time": {"submission": number(record.get("submit_time")),
                 "start": number(record.get("start_time")), "end": number(record.get("end_time")),
                 "limit": record.get("time_limit")},
        "exit_code": record.get("exit_code"), "user": record.get("user_name"),
        "partition": record.get("partition"), "nodes": record.get("nodes"),
        "comment": {"job": record.get("comment")}, "working_directory": record.get("current_working_directory"),
        "array": {"job_id": number(record.get("array_job_id")), "task_id": record.get("array_task_id")},
        "stdout": record.get("standard_output"), "stderr": record.get("standard_error"),
    }

count = 0
for fixture in sorted(pathlib.Path("tests/fixtures").glob("*/*.json")):
    envelope = json.loads(fixture.read_text())
    request = envelope["request"]
    call = endpoint(request["method"], request["path"])
    if call is None:
        continue
    name = f"seed-{fixture.parent.name}-{fixture.stem}"
    seed(name, call, envelope["status"], envelope["body"])
    count += 1
    body = envelope["body"]
    if call == "job" and isinstance(body, dict) and body.get("jobs"):
        records = {k: v for k, v in body.items() if k != "jobs"}
        records["jobs"] = [accounting(r) for r in body["jobs"]]
        seed(f"{name}-accounting", "accounting", envelope["status"], records)
        count += 1
print(f"{count} seeds in {out}")
PY
}

for target in "${targets[@]}"; do
    case $target in
        response | state_mapping) ;;
        *) echo "unknown target: $target (response, state_mapping)" >&2; exit 2 ;;
    esac
done

echo "== building fuzz targets (fuzz/target, sanitizer: $sanitizer)"
nice_run cargo fuzz build --sanitizer "$sanitizer"
# The binaries are run directly: `cargo fuzz run` would build again first, and rebuild the
# whole operator whenever someone edits src/ meanwhile.
bin_dir=fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release

failed=0
for target in "${targets[@]}"; do
    corpus=fuzz/corpus/$target
    mkdir -p "$corpus" "fuzz/artifacts/$target"
    args=(-artifact_prefix="fuzz/artifacts/$target/" -max_total_time="$time" -print_final_stats=1)
    if [ "$target" = response ]; then
        seed_response
        args+=(-dict=fuzz/response.dict -max_len=131072)
    fi
    if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then
        args+=(-fork="$FUZZ_JOBS")
    fi
    log=fuzz/artifacts/$target/last-run.log
    echo "== $target: ${time}s (full log: $log)"
    set +e
    nice_run "$bin_dir/$target" "${args[@]}" "$corpus" 2>&1 | tee "$log" |
        grep --line-buffered -E '(INITED|pulse|DONE) |^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|panicked at|==[0-9]+== ERROR'
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -ne 0 ]; then
        artifact=$(grep -oE 'fuzz/artifacts/[^ ]*/(crash|oom|timeout|leak|slow-unit)-[0-9a-f]+' "$log" | tail -1)
        echo "!! $target failed (exit $rc); reproducer: ${artifact:-none written, see $log}" >&2
        echo "   replay: $bin_dir/$target ${artifact:-<file>}" >&2
        failed=1
    fi
done
exit $failed
