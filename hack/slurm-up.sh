#!/usr/bin/env bash
# Brings up a real Slurm (slurmctld, 3 static slurmd n1..n3, slurmrestd with auth/jwt, and
# accounting: slurmdbd on MariaDB) from Debian packages in a debootstrap'ed root. The host stays
# as it is; the root is cached. Tenants for the multi-tenancy tests: users alice (account team-a,
# QoS tenant-low and tenant-capped allowed) and bob (team-b), associations and limits enforced
# (hack/ACCOUNTING.md, "Tenants").
#
# Usage: hack/slurm-up.sh [--flavour trixie|forky] [--fresh] [--keep-state] [--rebuild]
#                         [--timeout SECONDS]
#
#   --flavour trixie   Slurm 24.11 (default; REST on 127.0.0.1:6820, slurmdbd on 17100)
#   --flavour forky    Slurm 26.05 (REST on 127.0.0.1:6830, slurmdbd on 18100); both can run
#                      side by side (MariaDB listens on a unix socket inside each root only)
#   --fresh            cold start even if already running
#   --keep-state       keep the controller's saved state (jobs, job id counter, dynamic nodes,
#                      drain states) and the accounting database across the cold start, like a
#                      real controller restart. By default every cold start wipes them (the
#                      accounting database is dropped), with slurmd spool and logs, so the
#                      cluster comes up empty with n1..n3 IDLE and job ids from 1. (Jobs killed
#                      by slurm-down.sh would otherwise stay RUNNING in the controller.)
#   --rebuild          also delete and rebuild the root filesystem (implies --fresh). Not needed
#                      for a root cached by an older version of this script: packages it lacks
#                      are installed on the next cold start.
#
# On success prints shell-sourceable KEY=value lines (also written to
# /var/tmp/slurm-operator/<flavour>/env) and exits 0. Progress goes to stderr.
# If everything is already running and answers an authenticated REST call, it only re-prints the
# env. Ready means: authenticated GETs of /slurm/v0.0.42/diag and /slurmdb/v0.0.42/jobs/ answer
# 200 and n1..n3 are IDLE. Every cold start generates a fresh jwt_hs256.key and slurm.key (old
# tokens stop working).
#
# Environment: SLURM_DEBIAN_MIRROR (mirror URI; default: the host's apt configuration),
#              SLURM_OPERATOR_BASE (default /var/tmp/slurm-operator), SLURM_UP_TIMEOUT (60).
set -euo pipefail
set +m
SLURM_LOG_TAG=slurm-up
# shellcheck source=hack/lib/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm-common.sh"

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }

slurm_parse_flavour "$@"
fresh=0
keep_state=0
rebuild=0
timeout=${SLURM_UP_TIMEOUT:-60}
set -- ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}
while (($#)); do
    case "$1" in
        --fresh) fresh=1 ;;
        --keep-state) keep_state=1 ;;
        --rebuild) rebuild=1; fresh=1 ;;
        --timeout) [[ $# -ge 2 ]] || die "--timeout needs a value"; timeout=$2; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done
[[ $EUID -eq 0 ]] || die "must run as root (chroot, mount, debootstrap)"

t_start=$(date +%s.%N)
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

slurm_lock

DAEMONS=(mariadbd slurmdbd slurmctld slurmd-n1 slurmd-n2 slurmd-n3 slurmrestd)
daemon_comm() { case "$1" in slurmd-*) echo slurmd ;; *) echo "$1" ;; esac; }

all_alive() {
    local d
    for d in "${DAEMONS[@]}"; do
        slurm_pid_alive "$SLURM_STATE_DIR/$d.pid" "$(daemon_comm "$d")" || return 1
    done
}

# The accounting probe goes through slurmrestd to slurmdbd and MariaDB, filtered on a job name
# nobody uses, so that it stays cheap however many records the database holds (200, "found nothing").
SLURMDB_PROBE='/slurmdb/v0.0.42/jobs/?job_name=slurm-up-readiness-probe'

rest_ok() {
    local token
    token=$(slurm_mint_token 300) || return 1
    slurm_rest_get /slurm/v0.0.42/diag "$token" >/dev/null 2>&1 \
        && slurm_rest_get "$SLURMDB_PROBE" "$token" >/dev/null 2>&1
}

# fail_start WHAT LOGFILE...: logs, stops everything and exits.
fail_start() {
    local what=$1
    shift
    log "$what"
    show_logs "$@"
    slurm_stop_all
    die "Slurm ($SLURM_FLAVOUR) failed to start: $what"
}

# True when something listens on TCP port $1 (any address; /proc/net/tcp{,6}, no connection made).
tcp_listening() {
    local hex files=(/proc/net/tcp)
    [[ -r /proc/net/tcp6 ]] && files+=(/proc/net/tcp6)
    hex=$(printf ':%04X' "$1")
    awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        "${files[@]}"
}

# spawned_alive NAME: the process slurm_spawn started as NAME still runs (its comm may still be
# setsid or chroot right after the spawn, so it is not checked here).
spawned_alive() {
    local pid
    pid=$(cat "$SLURM_STATE_DIR/$1.pid" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] && slurm_proc_live "$pid"
}

db_sql() {
    slurm_chroot mariadb --no-defaults --protocol=socket -S "$SLURM_DB_SOCKET" -u root --batch "$@"
}

emit_env() {
    local text
    text=$(slurm_env_text)
    printf '%s\n' "$text" >"$SLURM_ENV_FILE.tmp"
    mv "$SLURM_ENV_FILE.tmp" "$SLURM_ENV_FILE"
    printf '%s\n' "$text"
}

show_logs() {
    local f
    for f in "$@"; do
        [[ -s "$f" ]] || continue
        printf -- '---- tail %s\n' "$f" >&2
        tail -n 25 "$f" >&2
    done
}

# slurm.conf is read at start: an instance started by an older version of this script (without
# the tenants' enforcement, usage gathering or the short MinJobAge) needs the cold start. Missing
# tenant users or associations are only added.
conf_current() {
    local line
    for line in 'AccountingStorageEnforce=associations,limits,qos' 'JobAcctGatherType=jobacct_gather/linux' \
        'MinJobAge=30' 'SchedulerParameters=batch_sched_delay=0,bf_interval=5,sched_interval=5' \
        'MaxJobCount=150000'; do
        grep -qx "$line" "$SLURM_ROOT/etc/slurm/slurm.conf" 2>/dev/null || return 1
    done
}

# slurmrestd takes its JSON form from its environment at start: one started without this
# flavour's SLURMRESTD_JSON (by an older slurm-up.sh) needs the cold start too.
rest_json_current() {
    local pid
    pid=$(cat "$SLURM_STATE_DIR/slurmrestd.pid" 2>/dev/null) || return 1
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURMRESTD_JSON=$SLURM_REST_JSON"
}

# Fast path: already up and healthy.
if ((!fresh)) && slurm_root_ready && all_alive && rest_ok; then
    if ! conf_current; then
        log "running with an older slurm.conf (an older slurm-up.sh started it): cold start"
    elif ! rest_json_current; then
        log "slurmrestd runs without SLURMRESTD_JSON=$SLURM_REST_JSON (an older slurm-up.sh started it): cold start"
    elif slurm_ensure_tenant_users && slurm_ensure_tenant_accounting >"$SLURM_STATE_DIR/tenants.out" 2>&1; then
        emit_env
        log "already running ($(elapsed) s)"
        exit 0
    else
        log "could not add the tenants to the running Slurm: cold start"
        show_logs "$SLURM_STATE_DIR/tenants.out"
    fi
fi

# Anything half-running is stopped first; a cold start always starts all daemons together.
slurm_stop_all
if ((rebuild)); then
    log "removing root $SLURM_ROOT (--rebuild)"
    slurm_remove_root
    rm -f "$SLURM_ROOT_MARKER"
fi
slurm_ensure_root
slurm_mount

R=$SLURM_ROOT
if ((!keep_state)); then
    log "wiping controller state and slurmd spool (the accounting database follows below)"
    rm -rf "${R:?}"/var/lib/slurm/slurmctld/* "${R:?}"/var/spool/slurmd/* "${SLURM_DYN_DIR:?}"/*
    # Job ids start again at 1, so an earlier run's output files would be reused by ids of other
    # users; /tmp is sticky, the new job could not open its output and would die (signal 53).
    rm -f "${R:?}"/tmp/slurm-*.out
fi
slurm_prepare_dirs
slurm_ensure_tenant_users
# Logs (run/*.out: the daemons' stdout/stderr; var/log/slurm/*.log in the root): keep one
# previous generation as *.prev.
shopt -s nullglob
for f in "$SLURM_STATE_DIR"/*.out "$SLURM_DYN_DIR"/*.out "$R"/var/log/slurm/*.log; do
    mv -f "$f" "$f.prev"
done
shopt -u nullglob
slurm_write_conf
slurm_write_keys

# Accounting first: mariadbd (datadir initialised once), its database and user, then slurmdbd,
# which slurmctld registers with at start.
log "starting mariadbd, slurmdbd on port $SLURM_DBD_PORT"
if [[ ! -d "$R/var/lib/mysql/mysql" ]]; then
    log "initialising MariaDB's datadir"
    slurm_chroot mariadb-install-db --defaults-file="$SLURM_DB_CNF" --user=mysql --skip-test-db \
        >"$SLURM_STATE_DIR/mariadb-install-db.out" 2>&1 \
        || fail_start "mariadb-install-db failed" "$SLURM_STATE_DIR/mariadb-install-db.out"
fi
rm -f "$R$SLURM_DB_SOCKET"
slurm_spawn mariadbd chroot "$R" mariadbd --defaults-file="$SLURM_DB_CNF" --user=mysql
deadline=$((SECONDS + timeout))
drop_db=""
((keep_state)) || drop_db="DROP DATABASE IF EXISTS $SLURM_DB_NAME;"
until [[ -S "$R$SLURM_DB_SOCKET" ]] && db_sql -e "SELECT 1" >/dev/null 2>&1; do
    spawned_alive mariadbd || fail_start "mariadbd died" "$SLURM_STATE_DIR/mariadbd.out"
    ((SECONDS < deadline)) || fail_start "timed out waiting for mariadbd's socket" "$SLURM_STATE_DIR/mariadbd.out"
    sleep 0.05
done
db_sql -e "$drop_db
CREATE DATABASE IF NOT EXISTS $SLURM_DB_NAME;
CREATE USER IF NOT EXISTS '$SLURM_DB_USER'@'localhost' IDENTIFIED BY '$SLURM_DB_PASS';
ALTER USER '$SLURM_DB_USER'@'localhost' IDENTIFIED BY '$SLURM_DB_PASS';
GRANT ALL ON $SLURM_DB_NAME.* TO '$SLURM_DB_USER'@'localhost';" >"$SLURM_STATE_DIR/mariadb-setup.out" 2>&1 \
    || fail_start "setting up the accounting database failed" "$SLURM_STATE_DIR/mariadb-setup.out"
slurm_spawn slurmdbd chroot "$R" slurmdbd -D
until tcp_listening "$SLURM_DBD_PORT"; do
    spawned_alive slurmdbd || fail_start "slurmdbd died" "$SLURM_STATE_DIR/slurmdbd.out" "$R/var/log/slurm/slurmdbd.log"
    ((SECONDS < deadline)) \
        || fail_start "timed out waiting for slurmdbd on port $SLURM_DBD_PORT" "$SLURM_STATE_DIR/slurmdbd.out" "$R/var/log/slurm/slurmdbd.log"
    sleep 0.05
done
# Before slurmctld, so that it loads the associations it enforces when it registers. Retried:
# slurmdbd may listen a moment before it answers.
until slurm_ensure_tenant_accounting >"$SLURM_STATE_DIR/tenants.out" 2>&1; do
    spawned_alive slurmdbd || fail_start "slurmdbd died" "$SLURM_STATE_DIR/slurmdbd.out" "$R/var/log/slurm/slurmdbd.log"
    ((SECONDS < deadline)) \
        || fail_start "adding the tenants' accounts, users and QoS failed" "$SLURM_STATE_DIR/tenants.out" "$R/var/log/slurm/slurmdbd.log"
    sleep 0.2
done
log "accounting up ($(elapsed) s); starting slurmctld, slurmd n1..n3, slurmrestd on $SLURM_REST_URL"
slurm_start_slurmctld
# One slurmd at a time: each binds /run/slurm/sack.socket after unlinking the previous one, and
# two doing that at once make one of them die with "Address already in use". A slurmd writes its
# own pid file only after that point, so wait for it before starting the next.
for n in "${SLURM_STATIC_NODES[@]}"; do
    slurm_spawn "slurmd-$n" chroot "$R" slurmd -D -N "$n"
    # spawned_alive, not slurm_pid_alive: until its last exec the child is named bash, setsid or
    # chroot, and a name check would end the wait at once.
    until [[ -s "$R/run/slurmd-$n.pid" ]]; do
        spawned_alive "slurmd-$n" \
            || fail_start "slurmd-$n died" "$SLURM_STATE_DIR/slurmd-$n.out" "$R/var/log/slurm/slurmd-$n.log"
        ((SECONDS < deadline)) \
            || fail_start "timed out waiting for slurmd-$n to write its pid file" "$SLURM_STATE_DIR/slurmd-$n.out" "$R/var/log/slurm/slurmd-$n.log"
        sleep 0.05
    done
done
slurm_start_slurmrestd

# Wait: every daemon alive, an authenticated /diag and /slurmdb/.../jobs/ answer, n1..n3 IDLE
# (with --keep-state any responding state is accepted, since the saved state may have them busy
# or drained).
token=""
phase="slurmctld to mint a token"
while :; do
    for d in "${DAEMONS[@]}"; do
        if ! spawned_alive "$d"; then
            log "$d exited during start-up"
            case "$d" in
                slurmctld) show_logs "$SLURM_STATE_DIR/$d.out" "$R/var/log/slurm/slurmctld.log" ;;
                slurmd-*) show_logs "$SLURM_STATE_DIR/$d.out" "$R/var/log/slurm/${d}.log" ;;
                slurmdbd) show_logs "$SLURM_STATE_DIR/$d.out" "$R/var/log/slurm/slurmdbd.log" ;;
                *) show_logs "$SLURM_STATE_DIR/$d.out" ;;
            esac
            slurm_stop_all
            die "Slurm ($SLURM_FLAVOUR) failed to start: $d died"
        fi
    done
    if [[ -z "$token" ]]; then
        token=$(slurm_mint_token 300 || true)
    fi
    if [[ -n "$token" ]]; then
        phase="slurmrestd to answer an authenticated GET /slurm/v0.0.42/diag"
        if slurm_rest_get /slurm/v0.0.42/diag "$token" >/dev/null 2>&1; then
            phase="slurmrestd to answer an authenticated GET /slurmdb/v0.0.42/jobs/"
        fi
        if [[ "$phase" == *slurmdb* ]] && slurm_rest_get "$SLURMDB_PROBE" "$token" >/dev/null 2>&1; then
            phase="nodes n1..n3 to become IDLE"
            states=$(slurm_chroot sinfo -h -N -n n1,n2,n3 -o '%N %T' 2>/dev/null | sort -u || true)
            ok=1
            for n in "${SLURM_STATIC_NODES[@]}"; do
                st=$(awk -v n="$n" '$1 == n { print $2 }' <<<"$states")
                case "$st" in
                    idle) ;;
                    allocated | mixed | completing | drained | draining | planned | reserved)
                        ((keep_state)) || ok=0 ;;
                    *) ok=0 ;;
                esac
            done
            if ((ok)); then break; fi
        fi
    fi
    if ((SECONDS >= deadline)); then
        log "timed out after ${timeout} s waiting for $phase"
        [[ -n "${states:-}" ]] && log "node states: $(tr '\n' ' ' <<<"$states")"
        case "$phase" in
            slurmctld*) show_logs "$SLURM_STATE_DIR/slurmctld.out" "$R/var/log/slurm/slurmctld.log" ;;
            slurmrestd*slurmdb*) show_logs "$SLURM_STATE_DIR/slurmrestd.out" "$R/var/log/slurm/slurmdbd.log" ;;
            slurmrestd*) show_logs "$SLURM_STATE_DIR/slurmrestd.out" "$R/var/log/slurm/slurmctld.log" ;;
            *) show_logs "$R"/var/log/slurm/slurmd-n[1-3].log "$R/var/log/slurm/slurmctld.log" ;;
        esac
        die "Slurm ($SLURM_FLAVOUR) did not become ready; daemons left running, stop with hack/slurm-down.sh --flavour $SLURM_FLAVOUR"
    fi
    sleep 0.1
done
if grep -qv ' idle$' <<<"$states"; then
    log "note: restored node states: $(tr '\n' ' ' <<<"$states")"
fi

emit_env
log "ready ($(elapsed) s)"
