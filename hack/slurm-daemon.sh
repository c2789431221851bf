#!/usr/bin/env bash
# Stops or starts ONE daemon of the Slurm of hack/slurm-up.sh, e.g. for outage tests: slurmrestd
# (an outage of the REST API) or slurmctld (a controller restart; its saved state is kept, so
# jobs survive as with a real restart).
#
# Usage: hack/slurm-daemon.sh [--flavour trixie|forky] COMMAND slurmctld|slurmrestd
#   stop    SIGTERM (slurmctld saves its state on it), SIGKILL after 10 s. Not running: exit 0.
#   start   Starts it exactly as slurm-up.sh does (same command line and PID file) and waits up
#           to 30 s (--timeout SECONDS) until slurmctld answers `scontrol ping` / slurmrestd
#           listens on its port. Already running: exit 0.
#   status  Exit 0 if it runs, 3 if not.
#
# slurmrestd --data-parser v0.0.NN: a SECOND slurmrestd that loads only that data_parser plugin
# (`slurmrestd -d v0.0.NN`: one REST API version), on port <main port> + 20 + NN - 40 (`start`
# prints its URL), beside the main one, which keeps running; `stop` with the same option stops it.
#
# The rest of the cluster must be up (hack/slurm-up.sh). Messages go to stderr. Exit codes:
# 0 ok, 1 failure, 2 usage, 3 not running (status).
set -euo pipefail
set +m
SLURM_LOG_TAG=slurm-daemon
# shellcheck source=hack/lib/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm-common.sh"

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }
usage_error() { log "$*"; usage >&2; exit 2; }

slurm_parse_flavour "$@"
set -- ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}
case "${1:-}" in
    -h | --help | help) usage; exit 0 ;;
    stop | start | status) cmd=$1 ;;
    "") usage_error "missing command" ;;
    *) usage_error "unknown command '$1'" ;;
esac
shift
(($#)) || usage_error "$cmd: missing daemon"
daemon=$1
shift
[[ " ${SLURM_RESTARTABLE[*]} " == *" $daemon "* ]] ||
    usage_error "$cmd: '$daemon' is not one of: ${SLURM_RESTARTABLE[*]}"
timeout=30
while (($#)); do
    case "$cmd:$1" in
        *:--data-parser)
            [[ "$daemon" == slurmrestd && $# -ge 2 ]] || usage_error "--data-parser needs a value (slurmrestd only)"
            export SLURM_REST_DATA_PARSER=$2
            slurm_data_parsers | grep -qx -- "$2" ||
                die "the $SLURM_FLAVOUR root has no data_parser $2 (it has: $(slurm_data_parsers | paste -sd' '))"
            daemon=slurmrestd-$2
            shift ;;
        start:--timeout) [[ $# -ge 2 ]] || usage_error "--timeout needs a value"; timeout=$2; shift ;;
        *) usage_error "$cmd: unknown argument '$1'" ;;
    esac
    shift
done
[[ $EUID -eq 0 ]] || die "must run as root"

case "$cmd" in
    status)
        pid=$(slurm_daemon_pid "$daemon")
        [[ -n "$pid" ]] || { log "$daemon is not running"; exit 3; }
        log "$daemon runs (pid $pid)"
        ;;
    stop)
        slurm_lock
        pid=$(slurm_daemon_pid "$daemon")
        if [[ -z "$pid" ]]; then
            log "$daemon is not running"
            exit 0
        fi
        slurm_kill_pids 10 "$pid"
        rm -f "$SLURM_STATE_DIR/$daemon.pid"
        log "stopped $daemon (pid $pid)"
        ;;
    start)
        slurm_lock
        pid=$(slurm_daemon_pid "$daemon")
        if [[ -n "$pid" ]]; then
            log "$daemon already running (pid $pid)"
            [[ -z "${SLURM_REST_DATA_PARSER:-}" ]] ||
                echo "http://127.0.0.1:$(slurm_rest_parser_port "$SLURM_REST_DATA_PARSER")"
            exit 0
        fi
        slurm_is_mounted "$SLURM_ROOT/proc" ||
            die "Slurm ($SLURM_FLAVOUR) is not up; run hack/slurm-up.sh --flavour $SLURM_FLAVOUR"
        "slurm_start_${daemon%%-v*}"
        pid=$(<"$SLURM_STATE_DIR/$daemon.pid")
        deadline=$((SECONDS + timeout))
        until slurm_daemon_ready "$daemon"; do
            if ! slurm_proc_live "$pid"; then
                tail -n 20 "$SLURM_STATE_DIR/$daemon.out" >&2 2>/dev/null || true
                die "$daemon exited during start-up"
            fi
            ((SECONDS < deadline)) || die "$daemon (pid $pid) not ready after ${timeout} s"
            sleep 0.1
        done
        log "started $daemon (pid $pid)"
        [[ -z "${SLURM_REST_DATA_PARSER:-}" ]] ||
            echo "http://127.0.0.1:$(slurm_rest_parser_port "$SLURM_REST_DATA_PARSER")"
        ;;
esac
