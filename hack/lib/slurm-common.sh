# shellcheck shell=bash disable=SC2034,SC2016
# Shared helpers for hack/slurm-*.sh, gen-openapi.sh and record-fixtures.sh.
# Sourced, not executed. Callers run with `set -euo pipefail`.
#
# Layout (per flavour):
#   $SLURM_BASE/<flavour>/rootfs            debootstrap'ed Debian root with Slurm installed
#   $SLURM_BASE/<flavour>/rootfs.complete   completion marker; a root without it is rebuilt
#   $SLURM_BASE/<flavour>/run/              PID files and daemon stdout/stderr (the "state dir")
#   $SLURM_BASE/<flavour>/run/dyn/          dynamic nodes: <name>.pid, <name>.port, <name>.conf
#   $SLURM_BASE/<flavour>/env               env file written by slurm-up.sh
#   $SLURM_BASE/<flavour>/lock              flock(1) lock serialising up/down/node per flavour

SLURM_DEFAULT_FLAVOUR=trixie

if [[ -n "${SLURM_OPERATOR_BASE:-}" ]]; then
    SLURM_BASE=$SLURM_OPERATOR_BASE
elif [[ -d /var/tmp ]]; then
    SLURM_BASE=/var/tmp/slurm-operator
else
    SLURM_BASE=${TMPDIR:-/tmp}/slurm-operator
fi

log() { printf '[%s] %s\n' "${SLURM_LOG_TAG:-slurm}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# slurm_select_flavour FLAVOUR: sets every per-flavour variable.
slurm_select_flavour() {
    SLURM_FLAVOUR=$1
    case "$SLURM_FLAVOUR" in
        trixie)
            SLURM_SUITE=trixie
            SLURM_CTLD_PORT=17000
            SLURM_NODE_PORT_BASE=17000   # n1..n3 -> 17001..17003
            SLURM_DYN_PORT_MIN=17010
            SLURM_DYN_PORT_MAX=17099
            SLURM_DBD_PORT=17100
            SLURM_REST_PORT=6820
            # slurmrestd's JSON form (SLURMRESTD_JSON): Slurm's default, pretty-printed, here;
            # compact on forky, so the suite reads both forms.
            SLURM_REST_JSON=pretty
            ;;
        forky)
            SLURM_SUITE=forky
            SLURM_CTLD_PORT=18000
            SLURM_NODE_PORT_BASE=18000   # n1..n3 -> 18001..18003
            SLURM_DYN_PORT_MIN=18010
            SLURM_DYN_PORT_MAX=18099
            SLURM_DBD_PORT=18100
            SLURM_REST_PORT=6830
            SLURM_REST_JSON=compact
            ;;
        *) die "unknown flavour '$SLURM_FLAVOUR' (expected trixie or forky)" ;;
    esac
    SLURM_FLAVOUR_DIR=$SLURM_BASE/$SLURM_FLAVOUR
    SLURM_ROOT=$SLURM_FLAVOUR_DIR/rootfs
    SLURM_ROOT_MARKER=$SLURM_FLAVOUR_DIR/rootfs.complete
    SLURM_STATE_DIR=$SLURM_FLAVOUR_DIR/run
    SLURM_DYN_DIR=$SLURM_STATE_DIR/dyn
    SLURM_ENV_FILE=$SLURM_FLAVOUR_DIR/env
    SLURM_LOCK_FILE=$SLURM_FLAVOUR_DIR/lock
    SLURM_REST_URL=http://127.0.0.1:$SLURM_REST_PORT
    SLURM_STATIC_NODES=(n1 n2 n3)
}

# $SLURM_BASE holds the root filesystem root runs daemons from, the keys and the lock file:
# private to its owner (the chrooted daemons never walk the host path), and refused when
# another user made it first (in /var/tmp anyone may) or it is a symlink.
slurm_secure_base() {
    mkdir -p "$(dirname "$SLURM_BASE")"
    mkdir -m 0700 "$SLURM_BASE" 2>/dev/null || true
    # The entry itself (stat without -L: a symlink is not followed), ours and a directory: once
    # it is, in a sticky /var/tmp nobody else can swap it, and only then is it chmod'ed.
    [[ "$(stat -c '%u %F' -- "$SLURM_BASE")" == "$EUID directory" ]] \
        || die "$SLURM_BASE is not a directory of this user's (another user's, or a symlink); remove it or set SLURM_OPERATOR_BASE"
    chmod 0700 -- "$SLURM_BASE"
}

# Serialise scripts working on the same flavour. Takes fd 9; daemons are started with 9>&-.
slurm_lock() {
    slurm_secure_base
    mkdir -p "$SLURM_FLAVOUR_DIR"
    exec 9>"$SLURM_LOCK_FILE"
    if ! flock -w "${SLURM_LOCK_TIMEOUT:-180}" 9; then
        die "could not take $SLURM_LOCK_FILE (another slurm-*.sh is running for $SLURM_FLAVOUR?)"
    fi
}

# The Debian mirror: $SLURM_DEBIAN_MIRROR, else the host's apt configuration (deb822 first,
# then one-line format). Security and updates archives are skipped.
slurm_debian_mirror() {
    if [[ -n "${SLURM_DEBIAN_MIRROR:-}" ]]; then
        printf '%s\n' "${SLURM_DEBIAN_MIRROR%/}"
        return
    fi
    local f uri=""
    shopt -s nullglob
    for f in /etc/apt/sources.list.d/*.sources; do
        # Print the first URI of each stanza that is a "deb" stanza and not a security archive.
        uri=$(awk '
            function flush() { if (!done && uris != "" && types ~ /(^| )deb( |$)/ && uris !~ /security/ && suites !~ /security/) { print uris; done = 1; exit } uris=""; types=""; suites="" }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]*#/ { next }
            tolower($1) == "uris:" { uris=$2 }
            tolower($1) == "types:" { $1=""; types=$0 }
            tolower($1) == "suites:" { $1=""; suites=$0 }
            END { flush() }' "$f")
        [[ -n "$uri" ]] && break
    done
    if [[ -z "$uri" ]]; then
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [[ -r "$f" ]] || continue
            uri=$(awk '$1 == "deb" {
                    i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                    if ($i !~ /security/ && $(i+1) !~ /security/) { print $i; exit } }' "$f")
            [[ -n "$uri" ]] && break
        done
    fi
    shopt -u nullglob
    [[ -n "$uri" ]] || die "no Debian mirror found in /etc/apt; set SLURM_DEBIAN_MIRROR"
    printf '%s\n' "${uri%/}"
}

# ---------------------------------------------------------------------------------------------
# Mounts

slurm_is_mounted() { findmnt -rn --mountpoint "$1" >/dev/null 2>&1; }

# Every mount point at or below $SLURM_ROOT (deepest first).
slurm_mounts_under_root() {
    [[ -d "$SLURM_ROOT" ]] || return 0
    local root
    root=$(readlink -f "$SLURM_ROOT")
    findmnt -rn -o TARGET | awk -v r="$root" '$0 == r || index($0, r "/") == 1' | sort -r
}

slurm_mount() {
    local r=$SLURM_ROOT
    if ! slurm_is_mounted "$r/proc"; then mount -t proc proc "$r/proc"; fi
    if ! slurm_is_mounted "$r/sys"; then
        mount --rbind /sys "$r/sys"
        mount --make-rslave "$r/sys"
    fi
    if ! slurm_is_mounted "$r/dev"; then
        mount --rbind /dev "$r/dev"
        mount --make-rslave "$r/dev"
    fi
}

slurm_umount() {
    local r=$SLURM_ROOT m
    for m in dev sys proc; do
        if slurm_is_mounted "$r/$m"; then
            umount -R "$r/$m" 2>/dev/null || umount -R -l "$r/$m" 2>/dev/null || umount -l "$r/$m" || true
        fi
    done
    # Anything else left below the root (should not happen): lazy-unmount deepest first.
    local left
    left=$(slurm_mounts_under_root)
    if [[ -n "$left" ]]; then
        while read -r m; do umount -l "$m" 2>/dev/null || true; done <<<"$left"
    fi
}

# Remove the root filesystem, but only when nothing is mounted below it.
slurm_remove_root() {
    [[ -e "$SLURM_ROOT" ]] || return 0
    local left
    left=$(slurm_pids_in_root)
    [[ -z "$left" ]] || die "refusing to remove $SLURM_ROOT: processes still run in it: $(tr '\n' ' ' <<<"$left")"
    slurm_umount
    left=$(slurm_mounts_under_root)
    [[ -z "$left" ]] || die "refusing to remove $SLURM_ROOT, still mounted: $left"
    rm -rf --one-file-system "$SLURM_ROOT"
}

# ---------------------------------------------------------------------------------------------
# Root filesystem

slurm_chroot() { chroot "$SLURM_ROOT" "$@"; }

# Packages the root must have (the marker's packages= line lists what was installed). Optional
# ones are installed when the suite has them: the JWT plugin and the MySQL/MariaDB accounting
# storage plugin are separate packages in some releases.
SLURM_ROOT_PACKAGES=(slurmctld slurmd slurmrestd slurm-client slurmdbd mariadb-server mariadb-client)
SLURM_ROOT_OPTIONAL_PACKAGES=(slurm-wlm-jwt-plugin slurm-wlm-mysql-plugin)

# The root was built completely once (by any version of this script).
# (usr/sbin/slurmctld is an absolute symlink into the root's /etc/alternatives: test a real file.)
slurm_root_built() { [[ -f "$SLURM_ROOT_MARKER" && -x "$SLURM_ROOT/usr/sbin/slurmrestd" ]]; }

# Packages of the marker's packages= line, one per line.
slurm_root_marker_packages() {
    local line
    line=$(grep -m1 '^packages=' "$SLURM_ROOT_MARKER" 2>/dev/null || true)
    line=${line#packages=}
    [[ -n "$line" ]] || return 0
    tr ' ' '\n' <<<"$line" | sed '/^$/d'
}

# Required packages that the marker does not list (a root cached by an older script), one per line.
slurm_root_missing_packages() {
    local have p
    have=$(slurm_root_marker_packages)
    for p in "${SLURM_ROOT_PACKAGES[@]}"; do
        grep -qxF -- "$p" <<<"$have" || printf '%s\n' "$p"
    done
    return 0
}

slurm_root_ready() {
    slurm_root_built && [[ -z "$(slurm_root_missing_packages)" ]] \
        && [[ -x "$SLURM_ROOT/usr/sbin/slurmdbd" && -x "$SLURM_ROOT/usr/sbin/mariadbd" ]]
}

# The host's own tools: debootstrap builds the root, curl asks slurmrestd whether it answers,
# ss (iproute2) whether a daemon listens. A minimal Debian lacks the last two.
slurm_ensure_host_tools() {
    local tool pkgs=()
    for tool in debootstrap:debootstrap curl:curl ss:iproute2; do
        command -v "${tool%%:*}" >/dev/null 2>&1 || pkgs+=("${tool#*:}")
    done
    ((${#pkgs[@]})) || return 0
    log "installing on the host: ${pkgs[*]}"
    mkdir -p "$SLURM_BASE"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}"; } \
            >"$SLURM_BASE/host-apt.log" 2>&1; then
        tail -n 20 "$SLURM_BASE/host-apt.log" >&2
        die "could not install ${pkgs[*]} on the host (log: $SLURM_BASE/host-apt.log)"
    fi
}

# The apt steps of slurm_install_packages. Each step returns on failure: called on the left of
# `||`, the function runs with `set -e` off, and a failed `apt-get update` or `install` must
# not leave a root marked ready without its packages (nor skip the optional ones unnoticed).
slurm_apt_install_missing() {
    local p pkgs=()
    # A testing suite's Release file (forky's) is valid for a week only; a mirror that lags
    # behind serves one already expired, which apt refuses ("Release file ... is expired"):
    # seen on 2026-12-07, invalid for 31 days, and every fresh forky root failed to install.
    # Its signature is still checked.
    printf 'Acquire::Check-Valid-Until "false";\n' \
        >"$SLURM_ROOT/etc/apt/apt.conf.d/99slurm-operator-valid-until" || return 1
    slurm_chroot apt-get update -qq || return 1
    for p in "${SLURM_ROOT_PACKAGES[@]}"; do
        slurm_chroot dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' \
            || pkgs+=("$p")
    done
    for p in "${SLURM_ROOT_OPTIONAL_PACKAGES[@]}"; do
        if slurm_chroot dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
            continue
        fi
        if slurm_chroot apt-cache show "$p" >/dev/null 2>&1; then pkgs+=("$p"); fi
    done
    if ((${#pkgs[@]})); then
        slurm_chroot env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" \
            || return 1
    fi
    slurm_chroot apt-get clean
}

# slurm_install_packages BUILT: installs every required package the root lacks (all of them in a new
# root), plus the optional ones the suite has, then drops apt's caches and lists and (re)writes
# the marker listing what the root holds (BUILT: when debootstrap made it). The root must be
# mounted.
slurm_install_packages() {
    local built=$1 r=$SLURM_ROOT p installed
    slurm_apt_install_missing >>"$SLURM_FLAVOUR_DIR/apt.log" 2>&1 || {
        tail -n 30 "$SLURM_FLAVOUR_DIR/apt.log" >&2
        die "package installation failed (log: $SLURM_FLAVOUR_DIR/apt.log)"
    }
    rm -rf "${r:?}"/var/lib/apt/lists/*
    if ! slurm_chroot id slurmrestd >/dev/null 2>&1; then
        slurm_chroot useradd -r -M -d /nonexistent -s /usr/sbin/nologin slurmrestd
    fi
    installed=()
    for p in "${SLURM_ROOT_PACKAGES[@]}" "${SLURM_ROOT_OPTIONAL_PACKAGES[@]}"; do
        if slurm_chroot dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
            installed+=("$p")
        fi
    done
    {
        echo "flavour=$SLURM_FLAVOUR"
        echo "suite=$SLURM_SUITE"
        echo "built=$built"
        echo "updated=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "packages=${installed[*]}"
        echo "slurm_version=$(slurm_chroot dpkg-query -W -f '${Version}' slurmctld)"
        echo "mariadb_version=$(slurm_chroot dpkg-query -W -f '${Version}' mariadb-server)"
    } >"$SLURM_ROOT_MARKER.tmp"
    mv "$SLURM_ROOT_MARKER.tmp" "$SLURM_ROOT_MARKER"
}

# Builds the root filesystem if it is absent or was not completed; a complete root that lacks
# packages this version needs (cached by an older script) only gets those installed.
slurm_ensure_root() {
    slurm_ensure_host_tools
    if slurm_root_ready; then return; fi
    local t0=$SECONDS mirror script="" missing
    if slurm_root_built; then
        missing=$(slurm_root_missing_packages | tr '\n' ' ')
        log "adding packages to the cached root: ${missing:-(binaries missing; re-checking all)}"
        slurm_mount
        slurm_install_packages "$(sed -n 's/^built=//p' "$SLURM_ROOT_MARKER")"
        slurm_root_ready || die "root $SLURM_ROOT still incomplete after installing packages; try --rebuild"
        log "root updated in $((SECONDS - t0)) s"
        return
    fi
    mirror=$(slurm_debian_mirror)
    if [[ -e "$SLURM_ROOT" ]]; then
        log "removing incomplete root $SLURM_ROOT"
        slurm_remove_root
    fi
    rm -f "$SLURM_ROOT_MARKER" "$SLURM_FLAVOUR_DIR/apt.log"
    mkdir -p "$SLURM_FLAVOUR_DIR"
    if [[ ! -e /usr/share/debootstrap/scripts/$SLURM_SUITE ]]; then
        # Bookworm's debootstrap does not know newer suites; Debian suites all use the sid script.
        script=/usr/share/debootstrap/scripts/sid
    fi
    log "debootstrap $SLURM_SUITE from $mirror into $SLURM_ROOT (about 40 s)"
    if ! debootstrap --variant=minbase "$SLURM_SUITE" "$SLURM_ROOT" "$mirror" ${script:+"$script"} \
            >"$SLURM_FLAVOUR_DIR/debootstrap.log" 2>&1; then
        tail -n 30 "$SLURM_FLAVOUR_DIR/debootstrap.log" >&2
        die "debootstrap failed (log: $SLURM_FLAVOUR_DIR/debootstrap.log)"
    fi
    local r=$SLURM_ROOT
    cp /etc/hosts "$r/etc/hosts"
    # No daemon may start from a package's maintainer script (mariadb-server's would).
    printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
    chmod +x "$r/usr/sbin/policy-rc.d"
    slurm_mount
    log "installing Slurm and MariaDB packages in the root"
    slurm_install_packages "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    log "root ready in $((SECONDS - t0)) s"
}

# Accounting: slurmdbd stores into MariaDB in the same root, reached only through its unix socket
# (skip-networking), so the trixie and forky roots never share a port or a database.
SLURM_DB_NAME=slurm_acct_db
SLURM_DB_USER=slurm
SLURM_DB_PASS=slurmdbd-local   # not a secret: the server has no TCP listener at all
SLURM_DB_SOCKET=/run/mysqld/mysqld.sock
SLURM_DB_CNF=/etc/mysql/slurm-operator.cnf

# Writes slurm.conf, slurmdbd.conf and MariaDB's config (every start, so port changes in this file
# take effect).
slurm_write_conf() {
    local r=$SLURM_ROOT p1=$((SLURM_NODE_PORT_BASE + 1)) p3=$((SLURM_NODE_PORT_BASE + 3))
    mkdir -p "$r/etc/slurm"
    cat >"$r/etc/slurm/slurm.conf.new" <<EOF
# Written by hack/slurm-up.sh (flavour $SLURM_FLAVOUR); rewritten on every cold start.
ClusterName=local
SlurmctldHost=localhost
SlurmctldPort=$SLURM_CTLD_PORT
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
# disable_token_creation: only SlurmUser and root may run scontrol token; the operator signs
# its own tokens, and a tenant's job must not mint itself one that bypasses the operator.
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key,disable_token_creation
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# What a job used (CPU time, max RSS) reaches accounting: the SlurmJob status' usage and
# efficiency (issue 18). Sampled every second, so that a test job of a few seconds has its peak.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# sched/builtin estimates pending jobs' start times every 'interval=' seconds (the first such
# word in SchedulerParameters, which bf_interval= is; builtin.c, 30 s by default, seen every
# 60 s): 5 s lets a test see a SlurmJob's estimated start without waiting a minute.
# sched_interval: a job whose begin time passes starts at the main loop's next periodic pass
# (60 s by default) unless some other event runs it first; 5 s keeps such tests from waiting a
# minute on a quiet controller. It comes after bf_interval= so that builtin's "interval=" is
# still that one.
SchedulerParameters=batch_sched_delay=0,bf_interval=5,sched_interval=5
ReturnToService=2
SlurmdTimeout=30
KillWait=5
MailProg=/bin/true
MpiDefault=none
# hack/bench.sh adds 1 000 CLOUD nodes for the operator's memory measurement; tests add dynamic ones
MaxNodeCount=1200
# hack/bench.sh holds 100 000 jobs next to the ones it has just cancelled (kept MinJobAge)
MaxJobCount=150000
# Ended jobs leave slurmctld after 30 s (purged about once a minute), not 300 s: tests see what a
# SlurmJob shows once only accounting knows its job, without waiting minutes for it.
MinJobAge=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$SLURM_DBD_PORT
AccountingStoreFlags=job_comment
# A job needs an association (user, account) and a QoS that association allows, so that the
# multi-tenancy tests can see a wrong account or QoS refused; the limits of associations and
# QoS hold, so that they can see a submit over one (hack/ACCOUNTING.md, "Tenants").
AccountingStorageEnforce=associations,limits,qos
NodeName=n[1-3] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$p1-$p3 CPUs=1 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$r/etc/slurm/slurm.conf.new" "$r/etc/slurm/slurm.conf"

    # slurmdbd refuses a slurmdbd.conf that others can read; it must belong to SlurmUser.
    (
        umask 077
        cat >"$r/etc/slurm/slurmdbd.conf.new" <<EOF
# Written by hack/slurm-up.sh (flavour $SLURM_FLAVOUR); rewritten on every cold start.
AuthType=auth/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
DbdHost=localhost
DbdPort=$SLURM_DBD_PORT
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$SLURM_DB_USER
StoragePass=$SLURM_DB_PASS
StorageLoc=$SLURM_DB_NAME
EOF
    )
    slurm_chroot chown slurm:slurm /etc/slurm/slurmdbd.conf.new
    chmod 600 "$r/etc/slurm/slurmdbd.conf.new"
    mv "$r/etc/slurm/slurmdbd.conf.new" "$r/etc/slurm/slurmdbd.conf"

    # MariaDB: our own defaults file only (--defaults-file), no TCP, small and unsynced (test data).
    mkdir -p "$r/etc/mysql"
    cat >"$r$SLURM_DB_CNF.new" <<EOF
# Written by hack/slurm-up.sh (flavour $SLURM_FLAVOUR); rewritten on every cold start.
[mariadbd]
datadir=/var/lib/mysql
socket=$SLURM_DB_SOCKET
pid-file=/run/mysqld/mysqld.pid
skip-networking
skip-name-resolve
skip-log-bin
innodb_buffer_pool_size=32M
innodb_log_file_size=64M
innodb_lock_wait_timeout=900
innodb_flush_log_at_trx_commit=0
innodb_doublewrite=0
innodb_use_native_aio=0
# Slurm 26.05 slurmdbd: "innodb_snapshot_isolation is enabled, which is not supported by Slurm"
innodb_snapshot_isolation=OFF
performance_schema=OFF
EOF
    mv "$r$SLURM_DB_CNF.new" "$r$SLURM_DB_CNF"
}

# ---------------------------------------------------------------------------------------------
# Tenants: ordinary users for the multi-tenancy tests (namespace team-a runs its jobs as alice,
# team-b as bob). What exists and why: hack/ACCOUNTING.md, "Tenants".

# USER:UID:ACCOUNT; the user's own group has GID = UID. The UIDs stay clear of Debian's system
# range and of the 1000s that a first human user would take.
SLURM_TENANTS=(alice:2001:team-a bob:2002:team-b)
SLURM_TENANT_QOS=tenant-low
SLURM_TENANT_QOS_USERS=(alice)   # the only ones allowed SLURM_TENANT_QOS (bob is refused it)
# A QoS no job fits (MaxSubmitJobsPerUser=0), allowed to the same users and to slurm (the tests'
# own user): every submit with it is refused over a limit (Slurm error 2050, "Job violates
# accounting/QOS policy").
SLURM_CAPPED_QOS=tenant-capped
# The cluster's own root account (sacctmgr add cluster makes it, with user root): with
# AccountingStorageEnforce, SLURM_USER (slurm, which every test and script submits as) needs an
# association too, and gets it there.
SLURM_DEFAULT_ACCOUNT=root

# slurm_tenant_field N: field N (1 user, 2 uid, 3 account) of every tenant, one per line.
slurm_tenant_field() { printf '%s\n' "${SLURM_TENANTS[@]}" | cut -d: -f"$1"; }

# True when every tenant has its passwd line (uid, gid, home, shell) and its home directory
# (read on the host side: no chroot, so cheap enough for slurm-up.sh's "already running" path).
slurm_tenant_users_ok() {
    local t user uid acct
    for t in "${SLURM_TENANTS[@]}"; do
        IFS=: read -r user uid acct <<<"$t"
        grep -qxF "$user:x:$uid:$uid::/home/$user:/bin/bash" "$SLURM_ROOT/etc/passwd" 2>/dev/null || return 1
        [[ -d "$SLURM_ROOT/home/$user" && "$(stat -c %u "$SLURM_ROOT/home/$user")" == "$uid" ]] || return 1
    done
}

# Creates the tenants' groups, users and home directories in the root where missing (idempotent;
# a user that exists with another uid is an error, not silently changed).
slurm_ensure_tenant_users() {
    slurm_tenant_users_ok && return 0
    local t user uid acct have
    for t in "${SLURM_TENANTS[@]}"; do
        IFS=: read -r user uid acct <<<"$t"
        if ! slurm_chroot getent group "$user" >/dev/null; then
            slurm_chroot groupadd -g "$uid" "$user"
        fi
        if have=$(slurm_chroot id -u "$user" 2>/dev/null); then
            [[ "$have" == "$uid" ]] || die "user $user has uid $have in $SLURM_ROOT, want $uid (rebuild with --rebuild)"
            slurm_chroot usermod -g "$uid" -d "/home/$user" -s /bin/bash -c "" "$user"
        else
            log "adding user $user (uid $uid) to the root"
            slurm_chroot useradd -u "$uid" -g "$uid" -m -d "/home/$user" -s /bin/bash "$user"
        fi
        # Job output lands in the home directory (sbatch's default: the submit directory).
        [[ -d "$SLURM_ROOT/home/$user" ]] || slurm_chroot install -d -m 0750 "/home/$user"
        slurm_chroot chown "$user:$user" "/home/$user"
    done
    slurm_tenant_users_ok || die "tenant users still incomplete in $SLURM_ROOT/etc/passwd"
}

# The associations, one "account|user|qos" line each (qos sorted), as slurmdbd has them.
slurm_tenant_assocs_have() {
    slurm_chroot sacctmgr -n -P list assoc cluster=local format=account,user,qos \
        | awk -F'|' '{
            n = split($3, q, ",")
            for (i = 2; i <= n; i++) for (j = i; j > 1 && q[j - 1] > q[j]; j--) { x = q[j]; q[j] = q[j - 1]; q[j - 1] = x }
            s = ""; for (i = 1; i <= n; i++) s = s (i > 1 ? "," : "") q[i]
            print $1 "|" $2 "|" s }' \
        | sort
}

# The associations these scripts want (a subset of what slurmdbd may hold).
slurm_tenant_assocs_want() {
    local t user uid acct qos
    {
        echo "$SLURM_DEFAULT_ACCOUNT||normal"
        echo "$SLURM_DEFAULT_ACCOUNT|root|normal"
        echo "$SLURM_DEFAULT_ACCOUNT|slurm|normal,$SLURM_CAPPED_QOS"
        for t in "${SLURM_TENANTS[@]}"; do
            IFS=: read -r user uid acct <<<"$t"
            qos=normal
            [[ " ${SLURM_TENANT_QOS_USERS[*]} " == *" $user "* ]] \
                && qos="normal,$SLURM_CAPPED_QOS,$SLURM_TENANT_QOS"
            echo "$acct||normal"
            echo "$acct|$user|$qos"
        done
    } | sort
}

# Adds to the accounting database (slurmdbd must be up; slurmctld need not be) what is missing of:
# cluster local, QoS tenant-low, accounts team-a and team-b, and the associations slurm->root
# (default), alice->team-a (default; QoS normal and tenant-low), bob->team-b (default; normal
# only). Idempotent: with everything there it costs one sacctmgr call. sacctmgr -i: no prompt.
slurm_ensure_tenant_accounting() {
    local want have missing t user uid acct accts=()
    want=$(slurm_tenant_assocs_want)
    have=$(slurm_tenant_assocs_have) || return 1
    missing=$(comm -23 <(printf '%s\n' "$want") <(printf '%s\n' "$have"))
    [[ -n "$missing" ]] || return 0
    log "adding accounts, users and QoS to the accounting database"
    if ! grep -q "^$SLURM_DEFAULT_ACCOUNT|root|" <<<"$have"; then
        # The cluster registers itself when slurmctld first starts, but its associations must
        # exist before slurmctld loads them; adding it first is the documented order.
        slurm_chroot sacctmgr -i add cluster local >/dev/null
    fi
    if [[ -z "$(slurm_chroot sacctmgr -n -P list qos "$SLURM_TENANT_QOS" format=name)" ]]; then
        slurm_chroot sacctmgr -i add qos "$SLURM_TENANT_QOS" \
            description="tenant QoS for the multi-tenancy tests (alice only)" >/dev/null
    fi
    case "$(slurm_chroot sacctmgr -n -P list qos "$SLURM_CAPPED_QOS" format=name,maxsubmitjobsperuser)" in
        "") slurm_chroot sacctmgr -i add qos "$SLURM_CAPPED_QOS" MaxSubmitJobsPerUser=0 \
                description="no job fits: a submit over a limit (alice, slurm)" >/dev/null ;;
        "$SLURM_CAPPED_QOS|0") ;;
        *) slurm_chroot sacctmgr -i modify qos "$SLURM_CAPPED_QOS" set MaxSubmitJobsPerUser=0 >/dev/null ;;
    esac
    while IFS=: read -r user uid acct; do
        grep -q "^$acct||" <<<"$have" || accts+=("$acct")
    done < <(printf '%s\n' "${SLURM_TENANTS[@]}")
    if ((${#accts[@]})); then
        slurm_chroot sacctmgr -i add account "$(IFS=,; echo "${accts[*]}")" cluster=local \
            description="tenant of the multi-tenancy tests" organization=tenants >/dev/null
    fi
    # Users: a missing association is added; one whose QoS list differs is set to the wanted one.
    while IFS='|' read -r acct user qos; do
        [[ -n "$user" ]] || continue
        if ! grep -q "^$acct|$user|" <<<"$have"; then
            slurm_chroot sacctmgr -i add user "$user" account="$acct" defaultaccount="$acct" >/dev/null
        fi
        if ! grep -qxF "$acct|$user|$qos" <<<"$(slurm_tenant_assocs_have)"; then
            slurm_chroot sacctmgr -i modify user "$user" where account="$acct" cluster=local \
                set qos="$qos" >/dev/null
        fi
    done <<<"$missing"
    missing=$(comm -23 <(printf '%s\n' "$want") <(slurm_tenant_assocs_have))
    [[ -z "$missing" ]] || { log "still missing in the accounting database: $(tr '\n' ' ' <<<"$missing")"; return 1; }
}

# Fresh keys (called on every cold start).
slurm_write_keys() {
    local r=$SLURM_ROOT f
    # Made 0600 from the start (umask in a subshell) and moved into place whole: the JWT key
    # mints a token for any user.
    for f in slurm.key:1024 jwt_hs256.key:32; do
        (umask 077 && head -c "${f#*:}" /dev/urandom >"$r/etc/slurm/${f%%:*}.new")
        slurm_chroot chown slurm:slurm "/etc/slurm/${f%%:*}.new"
        mv -f "$r/etc/slurm/${f%%:*}.new" "$r/etc/slurm/${f%%:*}"
    done
}

slurm_prepare_dirs() {
    local r=$SLURM_ROOT n
    cp /etc/hosts "$r/etc/hosts"
    mkdir -p "$r/var/lib/slurm/slurmctld" "$r/var/log/slurm" "$r/var/spool/slurmd" "$r/run" \
        "$SLURM_STATE_DIR" "$SLURM_DYN_DIR"
    for n in "${SLURM_STATIC_NODES[@]}"; do mkdir -p "$r/var/spool/slurmd/$n"; done
    slurm_chroot chown slurm:slurm /var/lib/slurm/slurmctld /var/log/slurm
    # slurmdbd (as SlurmUser) wants /run/slurmdbd and cannot create it in /run itself.
    mkdir -p "$r/run/slurmdbd" "$r/run/mysqld" "$r/var/lib/mysql"
    slurm_chroot chown slurm:slurm /run/slurmdbd
    slurm_chroot chown mysql:mysql /run/mysqld /var/lib/mysql
}

# ---------------------------------------------------------------------------------------------
# Processes

# slurm_proc_live PID: the process exists and is not a zombie (zombies keep /proc/PID/comm).
slurm_proc_live() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ "${stat%% *}" != Z && "${stat%% *}" != X ]]
}

# slurm_pid_alive PIDFILE EXPECTED_COMM: true when the PID in the file runs EXPECTED_COMM.
slurm_pid_alive() {
    local f=$1 want=$2 pid comm
    [[ -s "$f" ]] || return 1
    pid=$(<"$f")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ "$comm" == "$want" ]] && slurm_proc_live "$pid"
}

# slurm_spawn NAME COMMAND...: starts COMMAND (chroot'ed by the caller) in its own session, in
# the background, stdin/stdout/stderr detached, and writes its PID to $SLURM_STATE_DIR/NAME.pid.
# `setsid` does not fork here (the background child is not a process-group leader under set +m),
# and setsid/chroot/env all exec, so $! is the daemon itself.
slurm_spawn() {
    local name=$1
    shift
    local out=$SLURM_STATE_DIR/$name.out
    setsid "$@" </dev/null >>"$out" 2>&1 9>&- &
    printf '%s\n' "$!" >"$SLURM_STATE_DIR/$name.pid"
}

# slurm_kill_pids SIGNAL_WAIT PID...: SIGTERM all, wait up to SIGNAL_WAIT seconds, SIGKILL the rest.
slurm_kill_pids() {
    local wait_s=$1
    shift
    local pids=("$@") p alive
    ((${#pids[@]})) || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local tries=$((wait_s * 10))
    while :; do
        alive=()
        for p in "${pids[@]}"; do
            if slurm_proc_live "$p"; then
                alive+=("$p")
            fi
        done
        ((${#alive[@]})) || return 0
        if ((tries-- <= 0)); then
            log "SIGKILL to stragglers: ${alive[*]}"
            kill -KILL "${alive[@]}" 2>/dev/null || true
            sleep 0.2
            return 0
        fi
        sleep 0.1
    done
}

# ---------------------------------------------------------------------------------------------
# REST / tokens

# Prints a fresh token for user slurm, minted by scontrol in the root.
slurm_mint_token() {
    local lifespan=${1:-600} out
    out=$(slurm_chroot scontrol token username=slurm lifespan="$lifespan" 2>/dev/null) || return 1
    out=${out#SLURM_JWT=}
    [[ -n "$out" ]] || return 1
    printf '%s\n' "$out"
}

# slurm_rest GET PATH TOKEN: prints the body; returns non-zero unless HTTP 200.
slurm_rest_get() {
    local path=$1 token=$2
    curl -fsS --max-time 5 -H "X-SLURM-USER-NAME: slurm" -H "X-SLURM-USER-TOKEN: $token" \
        "$SLURM_REST_URL$path"
}

slurm_release() {
    local v
    v=$(slurm_chroot sinfo -V 2>/dev/null) || v=""
    v=${v##* }
    if [[ -z "$v" ]]; then
        v=$(slurm_chroot dpkg-query -W -f '${Version}' slurmctld 2>/dev/null || true)
        v=${v%%-*}
    fi
    printf '%s\n' "$v"
}

slurm_env_text() {
    cat <<EOF
SLURM_FLAVOUR=$SLURM_FLAVOUR
SLURM_REST_URL=$SLURM_REST_URL
SLURM_JWT_KEY=$SLURM_ROOT/etc/slurm/jwt_hs256.key
SLURM_USER=slurm
SLURM_ROOT=$SLURM_ROOT
SLURM_CLUSTER_NAME=local
SLURM_RELEASE=$(slurm_release)
SLURM_PARTITION=debug
SLURM_STATE_DIR=$SLURM_STATE_DIR
SLURM_ACCOUNTING=1
SLURM_DBD_PORT=$SLURM_DBD_PORT
SLURM_DEFAULT_ACCOUNT=$SLURM_DEFAULT_ACCOUNT
SLURM_TENANT_USERS=$(slurm_tenant_field 1 | paste -sd,)
SLURM_TENANT_UIDS=$(slurm_tenant_field 2 | paste -sd,)
SLURM_TENANT_ACCOUNTS=$(slurm_tenant_field 3 | paste -sd,)
SLURM_TENANT_QOS=$SLURM_TENANT_QOS
SLURM_TENANT_QOS_USERS=$(IFS=,; echo "${SLURM_TENANT_QOS_USERS[*]}")
SLURM_CAPPED_QOS=$SLURM_CAPPED_QOS
SLURM_DATA_PARSERS=$(slurm_data_parsers | paste -sd,)
SLURM_REST_JSON=$SLURM_REST_JSON
EOF
}

# Common option parsing for --flavour; sets SLURM_ARGS to the remaining arguments.
slurm_parse_flavour() {
    local flavour=${SLURM_FLAVOUR:-$SLURM_DEFAULT_FLAVOUR}
    SLURM_ARGS=()
    while (($#)); do
        case "$1" in
            --flavour) [[ $# -ge 2 ]] || die "--flavour needs a value"; flavour=$2; shift 2 ;;
            --flavour=*) flavour=${1#--flavour=}; shift ;;
            *) SLURM_ARGS+=("$1"); shift ;;
        esac
    done
    slurm_select_flavour "$flavour"
}

# ---------------------------------------------------------------------------------------------
# Stopping

# PIDs of processes whose root directory is $SLURM_ROOT (daemons, slurmstepd, job scripts).
slurm_pids_in_root() {
    [[ -d "$SLURM_ROOT" ]] || return 0
    local root p link
    root=$(readlink -f "$SLURM_ROOT")
    for p in /proc/[0-9]*; do
        link=$(readlink "$p/root" 2>/dev/null) || continue
        [[ "$link" == "$root" || "$link" == "$root (deleted)" ]] && printf '%s\n' "${p#/proc/}"
    done
    return 0
}

# slurm_pidfile_pid FILE: prints the PID from FILE if that process runs a Slurm daemon (or the
# accounting's mariadbd) in $SLURM_ROOT.
slurm_pidfile_pid() {
    local f=$1 pid comm root link
    [[ -s "$f" ]] || return 0
    pid=$(head -n1 "$f" 2>/dev/null | tr -dc 0-9)
    [[ -n "$pid" ]] || return 0
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 0
    case "$comm" in slurmctld | slurmd | slurmrestd | slurmstepd | slurmdbd | mariadbd) ;; *) return 0 ;; esac
    slurm_proc_live "$pid" || return 0
    root=$(readlink -f "$SLURM_ROOT")
    link=$(readlink "/proc/$pid/root" 2>/dev/null) || return 0
    [[ "$link" == "$root" ]] && printf '%s\n' "$pid"
    return 0
}

# Stops every daemon this tooling started for the flavour (static and dynamic, slurmdbd
# included), then MariaDB (last, so that slurmdbd can still write on its way down), then anything
# else still running inside the root (slurmstepd and job processes they left), and unmounts.
slurm_stop_all() {
    local f pids=() db_pids=() p
    shopt -s nullglob
    for f in "$SLURM_STATE_DIR"/*.pid "$SLURM_DYN_DIR"/*.pid "$SLURM_ROOT"/run/slurmctld.pid \
            "$SLURM_ROOT"/run/slurmd-*.pid "$SLURM_ROOT"/run/slurmdbd.pid "$SLURM_ROOT"/run/mysqld/mysqld.pid; do
        p=$(slurm_pidfile_pid "$f")
        [[ -n "$p" ]] || continue
        if [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == mariadbd ]]; then
            db_pids+=("$p")
        else
            pids+=("$p")
        fi
    done
    shopt -u nullglob
    if ((${#pids[@]})); then
        mapfile -t pids < <(printf '%s\n' "${pids[@]}" | sort -un)
        log "stopping ${#pids[@]} daemon(s): ${pids[*]}"
        slurm_kill_pids "${SLURM_STOP_WAIT:-6}" "${pids[@]}"
    fi
    if ((${#db_pids[@]})); then
        mapfile -t db_pids < <(printf '%s\n' "${db_pids[@]}" | sort -un)
        log "stopping mariadbd: ${db_pids[*]}"
        slurm_kill_pids "${SLURM_DB_STOP_WAIT:-20}" "${db_pids[@]}"
    fi
    mapfile -t pids < <(slurm_pids_in_root)
    if ((${#pids[@]})); then
        log "stopping ${#pids[@]} leftover process(es) in the root: ${pids[*]}"
        slurm_kill_pids 3 "${pids[@]}"
    fi
    rm -f "$SLURM_STATE_DIR"/*.pid "$SLURM_DYN_DIR"/*.pid "$SLURM_ROOT"/run/slurmctld.pid \
        "$SLURM_ROOT"/run/slurmd-*.pid "$SLURM_ROOT"/run/slurmdbd.pid "$SLURM_ROOT"/run/mysqld/mysqld.pid
    slurm_umount
}

# ---------------------------------------------------------------------------------------------
# Restarting one daemon (hack/slurm-daemon.sh). The command lines are the ones hack/slurm-up.sh
# runs for these daemons, with the same PID files ($SLURM_STATE_DIR/<name>.pid), so slurm-up.sh
# and slurm-down.sh see a restarted daemon as their own.

# The daemons that can be stopped and started on their own.
SLURM_RESTARTABLE=(slurmctld slurmrestd)

# slurmctld, recovering the state saved in StateSaveLocation (no -c / -i).
slurm_start_slurmctld() { slurm_spawn slurmctld chroot "$SLURM_ROOT" slurmctld -D; }

# With SLURM_REST_DATA_PARSER set (e.g. v0.0.40): a second slurmrestd that loads only that
# data_parser plugin (`-d`), on its own port (slurm_rest_parser_port) and PID file
# (slurmrestd-<parser>.pid), beside the main one: a slurmrestd of one REST API version, for the
# per-version tests (tests/api_versions.rs).
slurm_start_slurmrestd() {
    local name=slurmrestd port=$SLURM_REST_PORT parser=()
    if [[ -n "${SLURM_REST_DATA_PARSER:-}" ]]; then
        name=slurmrestd-$SLURM_REST_DATA_PARSER
        port=$(slurm_rest_parser_port "$SLURM_REST_DATA_PARSER")
        parser=(-d "$SLURM_REST_DATA_PARSER")
    fi
    slurm_spawn "$name" chroot "$SLURM_ROOT" env SLURM_JWT=daemon SLURMRESTD_JSON="$SLURM_REST_JSON" \
        slurmrestd -a rest_auth/jwt -s slurmctld,slurmdbd "${parser[@]}" -u slurmrestd \
        -g slurmrestd "127.0.0.1:$port"
}

# slurm_rest_parser_port PARSER: the port of the slurmrestd serving only PARSER (v0.0.NN):
# the main port + 20 + NN - 40 (trixie 6840-6845, forky 6850-6855).
slurm_rest_parser_port() {
    [[ "$1" =~ ^v0\.0\.4[0-9]$ ]] || die "not a data parser version: $1"
    local minor=${1##*.}
    echo $((SLURM_REST_PORT + 20 + 10#$minor - 40))
}

# The data_parser plugins this root's slurmrestd can load (v0.0.40 ...), oldest first.
slurm_data_parsers() {
    local f
    for f in "$SLURM_ROOT"/usr/lib/*/slurm-wlm/data_parser_v0_0_*.so; do
        [[ -e "$f" ]] || continue
        f=${f##*/data_parser_}
        f=${f%.so}
        printf '%s\n' "${f//_/.}"
    done | sort -t. -k3,3n
}

# slurm_daemon_pid NAME: the PID of that daemon if it runs (PID file checked: comm, root).
slurm_daemon_pid() { slurm_pidfile_pid "$SLURM_STATE_DIR/$1.pid"; }

# slurm_daemon_ready NAME: slurmctld answers a ping / slurmrestd listens on its port.
slurm_daemon_ready() {
    case "$1" in
        slurmctld) slurm_chroot scontrol ping 2>/dev/null | grep -q 'is UP' ;;
        slurmrestd) [[ -n "$(ss -Hltn "sport = :$SLURM_REST_PORT" 2>/dev/null)" ]] ;;
        slurmrestd-v*)
            [[ -n "$(ss -Hltn "sport = :$(slurm_rest_parser_port "${1#slurmrestd-}")" 2>/dev/null)" ]] ;;
        *) return 1 ;;
    esac
}
