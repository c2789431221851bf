#!/usr/bin/env bash
# Starts and stops extra DYNAMIC slurmd nodes (`slurmd -Z`) in the Slurm of hack/slurm-up.sh; in
# tests they stand in for Kubernetes pods.
#
# Usage: hack/slurm-node.sh [--flavour trixie|forky] COMMAND ...
#   start NAME [--conf "CPUs=1 RealMemory=500 Feature=x"] [--extra TEXT] [--timeout SECONDS]
#         Starts `slurmd -D -Z -N NAME --conf "<conf> Port=P" [--extra TEXT]` with a port unique
#         to NAME (kept across restarts), and waits until slurmctld shows NAME registered by this
#         slurmd. --extra is the node's Extra field at registration (a SlurmNodeSet pod's owner
#         record). Already running: prints its status and exits 0. Default conf
#         "CPUs=1 RealMemory=500".
#   stop NAME [--delete]
#         SIGTERM (SIGKILL after 5 s) to that slurmd and to the job steps it ran (as a pod
#         deletion would). --delete also runs `scontrol delete nodename=NAME`. Not running: exit 0.
#   status NAME
#         Exit 0 if its slurmd runs, 3 if not.
#   list  One line per known dynamic node: NAME PORT PID|- running|stopped
#
# start/stop/status print KEY=value lines on stdout:
#   NODE_NAME, NODE_PORT, NODE_PID, NODE_RUNNING (1|0), NODE_STATE (scontrol State=, or "absent")
# Messages go to stderr. Exit codes: 0 ok, 1 failure, 2 usage, 3 not running (status).
set -euo pipefail
set +m
SLURM_LOG_TAG=slurm-node
# shellcheck source=hack/lib/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm-common.sh"

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }
usage_error() { log "$*"; usage >&2; exit 2; }

slurm_parse_flavour "$@"
set -- ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}
(($#)) || usage_error "missing command"
cmd=$1
shift
case "$cmd" in
    -h | --help | help) usage; exit 0 ;;
    start | stop | status | list) ;;
    *) usage_error "unknown command '$cmd'" ;;
esac
[[ $EUID -eq 0 ]] || die "must run as root"

name=""
conf="CPUs=1 RealMemory=500"
timeout=30
delete=0
extra=()
if [[ "$cmd" != list ]]; then
    (($#)) || usage_error "$cmd: missing NAME"
    name=$1
    shift
    [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$ ]] || usage_error "invalid node name '$name'"
fi
while (($#)); do
    case "$cmd:$1" in
        start:--conf) [[ $# -ge 2 ]] || usage_error "--conf needs a value"; conf=$2; shift ;;
        start:--conf=*) conf=${1#--conf=} ;;
        start:--extra) [[ $# -ge 2 ]] || usage_error "--extra needs a value"; extra=(--extra "$2"); shift ;;
        start:--timeout) [[ $# -ge 2 ]] || usage_error "--timeout needs a value"; timeout=$2; shift ;;
        stop:--delete) delete=1 ;;
        *) usage_error "$cmd: unknown argument '$1'" ;;
    esac
    shift
done

R=$SLURM_ROOT
pidfile() { printf '%s/%s.pid\n' "$SLURM_DYN_DIR" "$1"; }
portfile() { printf '%s/%s.port\n' "$SLURM_DYN_DIR" "$1"; }

# PID of NAME's slurmd if it runs (checked: comm slurmd, inside this root), else empty.
node_pid() { slurm_pidfile_pid "$(pidfile "$1")"; }

node_state() {
    local line
    line=$(slurm_chroot scontrol -o show node "$1" 2>/dev/null) || { echo absent; return; }
    line=$(grep -o 'State=[^ ]*' <<<"$line" | head -n1 || true)
    printf '%s\n' "${line#State=}"
}

print_status() {
    local n=$1 pid port
    pid=$(node_pid "$n")
    port=$(cat "$(portfile "$n")" 2>/dev/null || true)
    echo "NODE_NAME=$n"
    echo "NODE_PORT=${port}"
    echo "NODE_PID=${pid}"
    if [[ -n "$pid" ]]; then echo "NODE_RUNNING=1"; else echo "NODE_RUNNING=0"; fi
    if slurm_pid_alive "$SLURM_STATE_DIR/slurmctld.pid" slurmctld; then
        echo "NODE_STATE=$(node_state "$n")"
    else
        echo "NODE_STATE=unknown"
    fi
}

require_cluster() {
    slurm_pid_alive "$SLURM_STATE_DIR/slurmctld.pid" slurmctld ||
        die "Slurm ($SLURM_FLAVOUR) is not running; run hack/slurm-up.sh --flavour $SLURM_FLAVOUR first"
}

# Whether slurmctld knows node NAME.
node_known() {
    slurm_chroot scontrol -o show node "$1" >/dev/null 2>&1
}

# Forget the recorded port and conf of nodes that are neither running nor known to slurmctld
# (deleted by someone else, e.g. the operator's scale-in, or by a cold start): their ports are
# free again.
reclaim_ports() {
    local f n
    shopt -s nullglob
    for f in "$SLURM_DYN_DIR"/*.port; do
        n=$(basename "$f" .port)
        [[ -z "$(node_pid "$n")" ]] && ! node_known "$n" || continue
        log "reclaimed port $(cat "$f") of $n (not running, not in slurmctld)"
        rm -f "$f" "$SLURM_DYN_DIR/$n.conf"
    done
    shopt -u nullglob
}

# Lowest port in the flavour's dynamic range that no other recorded node uses and nothing listens
# on; when there is none, the ports of nodes gone for good are reclaimed first.
allocate_port() {
    local p used attempt
    for attempt in first reclaimed; do
        [[ $attempt == first ]] || reclaim_ports
        used=$(cat "$SLURM_DYN_DIR"/*.port 2>/dev/null || true)
        for ((p = SLURM_DYN_PORT_MIN; p <= SLURM_DYN_PORT_MAX; p++)); do
            grep -qx "$p" <<<"$used" && continue
            [[ -n "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]] && continue
            echo "$p"
            return 0
        done
    done
    die "no free port in $SLURM_DYN_PORT_MIN-$SLURM_DYN_PORT_MAX"
}

# PIDs of slurmstepd processes serving NAME (they hold NAME's slurmd log file open) plus their
# descendants.
node_step_pids() {
    local n=$1 root logf p fd
    root=$(readlink -f "$R")
    logf=$root/var/log/slurm/slurmd-$n.log
    local stepds=()
    while read -r p; do
        [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == slurmstepd ]] || continue
        for fd in /proc/"$p"/fd/*; do
            if [[ "$(readlink "$fd" 2>/dev/null)" == "$logf" ]]; then
                stepds+=("$p")
                break
            fi
        done
    done < <(slurm_pids_in_root)
    ((${#stepds[@]})) || return 0
    # Descendants (job scripts and what they run).
    local queue=("${stepds[@]}") kids
    while ((${#queue[@]})); do
        p=${queue[0]}
        queue=("${queue[@]:1}")
        echo "$p"
        kids=$(cat /proc/"$p"/task/*/children 2>/dev/null || true)
        for k in $kids; do queue+=("$k"); done
    done
}

case "$cmd" in
    start)
        slurm_lock
        require_cluster
        pid=$(node_pid "$name")
        if [[ -n "$pid" ]]; then
            log "$name already running (pid $pid)"
            print_status "$name"
            exit 0
        fi
        mkdir -p "$SLURM_DYN_DIR"
        if [[ "$conf" =~ (^|[[:space:]])Port=([0-9]+) ]]; then
            port=${BASH_REMATCH[2]}
            full_conf=$conf
        else
            port=$(cat "$(portfile "$name")" 2>/dev/null || true)
            [[ -n "$port" ]] || port=$(allocate_port)
            full_conf="$conf Port=$port"
        fi
        echo "$port" >"$(portfile "$name")"
        printf '%s\n' "$full_conf" >"$SLURM_DYN_DIR/$name.conf"
        mkdir -p "$R/var/spool/slurmd/$name"
        t0=$(slurm_chroot date +%s)
        slurm_spawn "dyn/$name" chroot "$R" slurmd -D -Z -N "$name" --conf "$full_conf" ${extra[@]+"${extra[@]}"}
        pid=$(cat "$(pidfile "$name")")
        # Release the lock while waiting, so several nodes can start in parallel.
        flock -u 9
        exec 9>&-
        log "started $name (pid $pid, port $port, conf: $full_conf)"
        deadline=$((SECONDS + timeout))
        while :; do
            if ! kill -0 "$pid" 2>/dev/null; then
                tail -n 20 "$R/var/log/slurm/slurmd-$name.log" "$SLURM_DYN_DIR/$name.out" >&2 2>/dev/null || true
                rm -f "$(pidfile "$name")"
                die "slurmd for $name exited during start-up"
            fi
            line=$(slurm_chroot scontrol -o show node "$name" 2>/dev/null || true)
            if [[ -n "$line" ]]; then
                st=$(grep -o 'SlurmdStartTime=[^ ]*' <<<"$line" | head -n1 || true)
                st=${st#SlurmdStartTime=}
                st_epoch=0
                if [[ -n "$st" && "$st" != None ]]; then
                    st_epoch=$(slurm_chroot date -d "$st" +%s 2>/dev/null || echo 0)
                fi
                state=$(grep -o 'State=[^ ]*' <<<"$line" | head -n1 || true)
                if ((st_epoch >= t0)) && [[ "$state" != *NOT_RESPONDING* && "$state" != State=DOWN* ]]; then
                    break
                fi
            fi
            if ((SECONDS >= deadline)); then
                tail -n 20 "$R/var/log/slurm/slurmd-$name.log" >&2 2>/dev/null || true
                die "$name did not register within ${timeout} s (slurmd left running; stop with: $0 --flavour $SLURM_FLAVOUR stop $name)"
            fi
            sleep 0.1
        done
        print_status "$name"
        ;;
    stop)
        slurm_lock
        pid=$(node_pid "$name")
        mapfile -t steps < <(node_step_pids "$name")
        if [[ -z "$pid" && ${#steps[@]} -eq 0 ]]; then
            log "$name is not running"
        else
            log "stopping $name (slurmd pid ${pid:-none}, ${#steps[@]} job process(es))"
            slurm_kill_pids 5 ${pid:+"$pid"} ${steps[@]+"${steps[@]}"}
        fi
        rm -f "$(pidfile "$name")"
        if ((delete)) && slurm_pid_alive "$SLURM_STATE_DIR/slurmctld.pid" slurmctld; then
            if out=$(slurm_chroot scontrol delete nodename="$name" 2>&1); then
                log "deleted $name from slurmctld"
                rm -f "$(portfile "$name")" "$SLURM_DYN_DIR/$name.conf"
            elif ! node_known "$name"; then
                # Deleted already (the operator's scale-in deletes node records itself).
                log "$name is not in slurmctld"
                rm -f "$(portfile "$name")" "$SLURM_DYN_DIR/$name.conf"
            else
                log "scontrol delete nodename=$name: $out"
            fi
        fi
        print_status "$name"
        ;;
    status)
        print_status "$name"
        [[ -n "$(node_pid "$name")" ]] || exit 3
        ;;
    list)
        shopt -s nullglob
        for f in "$SLURM_DYN_DIR"/*.port; do
            n=$(basename "$f" .port)
            pid=$(node_pid "$n")
            if [[ -n "$pid" ]]; then
                echo "$n $(cat "$f") $pid running"
            else
                echo "$n $(cat "$f") - stopped"
            fi
        done
        ;;
esac
