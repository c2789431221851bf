#!/usr/bin/env bash
# Checks the tenants of the running local Slurm (hack/slurm-up.sh; hack/ACCOUNTING.md, "Tenants"):
# jobs of alice and bob really run as them, with their accounts, and Slurm refuses a wrong
# account or QoS; SLURM_USER (slurm) and root still submit as before. Submits a few 1-second jobs.
# Prints PASS/FAIL per check and a last line `N passed, N failed`; exits non-zero on a failure.
#
# Usage: hack/check-tenants.sh [--flavour trixie|forky] [--timeout SECONDS]
set -euo pipefail
set +m
SLURM_LOG_TAG=check-tenants
# shellcheck source=hack/lib/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm-common.sh"

slurm_parse_flavour "$@"
timeout=30
set -- ${SLURM_ARGS[@]+"${SLURM_ARGS[@]}"}
while (($#)); do
    case "$1" in
        --timeout) [[ $# -ge 2 ]] || die "--timeout needs a value"; timeout=$2; shift ;;
        -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
[[ $EUID -eq 0 ]] || die "must run as root (chroot)"
[[ -r "$SLURM_ENV_FILE" ]] || die "no $SLURM_ENV_FILE: run hack/slurm-up.sh --flavour $SLURM_FLAVOUR"
# shellcheck disable=SC1090
. "$SLURM_ENV_FILE"
[[ -n "${SLURM_TENANT_USERS:-}" ]] || die "$SLURM_ENV_FILE has no SLURM_TENANT_USERS (started by an older slurm-up.sh?)"

passed=0
failed=0
check() {   # check NAME RC DETAIL...: PASS when RC is 0, else FAIL with DETAIL
    local name=$1 rc=$2
    shift 2
    if ((rc == 0)); then
        passed=$((passed + 1)); printf 'PASS %s\n' "$name"
    else
        failed=$((failed + 1)); printf 'FAIL %s: %s\n' "$name" "$*"
    fi
}

# A JWT for USER, signed with the key of the env file, as the tests and the operator mint them.
mint() {
    python3 - "$SLURM_JWT_KEY" "$1" <<'PY'
import base64, hashlib, hmac, json, sys, time
key = open(sys.argv[1], "rb").read()
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=")
now = int(time.time())
msg = b64(b'{"alg":"HS256","typ":"JWT"}') + b"." + b64(json.dumps({"iat": now, "exp": now + 300, "sun": sys.argv[2]}).encode())
print((msg + b"." + b64(hmac.new(key, msg, hashlib.sha256).digest())).decode())
PY
}

# rest_submit USER CWD: submits a 1-second job through slurmrestd as USER; prints the answer.
rest_submit() {
    local user=$1 cwd=$2
    curl -sS --max-time 10 -H "X-SLURM-USER-NAME: $user" -H "X-SLURM-USER-TOKEN: $(mint "$user")" \
        -H 'Content-Type: application/json' -X POST "$SLURM_REST_URL/slurm/v0.0.42/job/submit" \
        --data "{\"job\":{\"name\":\"tenant-check-$user\",\"partition\":\"$SLURM_PARTITION\",
                 \"current_working_directory\":\"$cwd\",\"environment\":[\"PATH=/usr/bin:/bin\"],
                 \"script\":\"#!/bin/sh\\nid -un\\nsleep 1\\n\"}}"
}

# sbatch_as USER ARGS...: sbatch run as USER inside the root, from USER's home; prints the job id.
sbatch_as() {
    local user=$1
    shift
    slurm_chroot runuser -u "$user" -- sh -c 'cd "$HOME" && exec sbatch --parsable "$@"' sh \
        -p "$SLURM_PARTITION" -J "tenant-check-$user" "$@" --wrap 'id -un; sleep 1'
}

# ended JOBID: waits until the job left the queue; prints "user|account|qos|state" from sacct.
ended() {
    local id=$1 deadline=$((SECONDS + timeout)) line
    while ((SECONDS < deadline)); do
        line=$(slurm_chroot sacct -n -P -X -j "$id" -o user,account,qos,state 2>/dev/null | head -n1)
        case "$line" in *'|COMPLETED' | *'|FAILED' | *'|CANCELLED'* | *'|TIMEOUT' | *'|NODE_FAIL') break ;; esac
        sleep 0.3
    done
    printf '%s\n' "$line"
}

IFS=, read -r -a users <<<"$SLURM_TENANT_USERS"
IFS=, read -r -a accounts <<<"$SLURM_TENANT_ACCOUNTS"
IFS=, read -r -a qos_users <<<"$SLURM_TENANT_QOS_USERS"

for i in "${!users[@]}"; do
    u=${users[$i]} a=${accounts[$i]}
    # sbatch as the user: runs as them (squeue %u while queued or running), in their account.
    id=$(sbatch_as "$u" 2>&1) || true
    if [[ "$id" =~ ^[0-9]+$ ]]; then
        q=$(slurm_chroot squeue -h -j "$id" -o '%u|%a' 2>/dev/null || true)
        r=$(ended "$id")
        out=$(cat "$SLURM_ROOT/home/$u/slurm-$id.out" 2>/dev/null || true)
        [[ ( -z "$q" || "$q" == "$u|$a" ) && "$r" == "$u|$a|normal|COMPLETED" && "$out" == "$u" ]] && rc=0 || rc=1
        check "sbatch as $u: job $id runs as $u in $a and completes" $rc "squeue '$q', sacct '$r', output '$out'"
    else
        check "sbatch as $u" 1 "$id"
    fi
    # Through slurmrestd with a JWT for the user (what the operator will do for a tenant).
    ans=$(rest_submit "$u" "/home/$u" 2>&1) || true
    id=$(sed -n 's/.*"job_id": *\([0-9][0-9]*\).*/\1/p' <<<"$ans" | head -n1)
    if [[ -n "$id" ]]; then
        r=$(ended "$id")
        [[ "$r" == "$u|$a|normal|COMPLETED" ]] && rc=0 || rc=1
        check "REST submit with a JWT for $u: job $id as $u in $a completes" $rc "sacct '$r'"
    else
        check "REST submit with a JWT for $u" 1 "$(head -c 400 <<<"$ans")"
    fi
    # Another tenant's account is refused.
    other=${accounts[$(((i + 1) % ${#accounts[@]}))]}
    out=$(sbatch_as "$u" -A "$other" 2>&1) && rc=0 || rc=$?
    ((rc != 0)) && grep -qi 'invalid account' <<<"$out" && ok=0 || ok=1
    check "sbatch as $u with account $other is refused" $ok "rc=$rc: $out"
    # The tenant QoS: allowed to SLURM_TENANT_QOS_USERS only.
    out=$(sbatch_as "$u" -q "$SLURM_TENANT_QOS" 2>&1) && rc=0 || rc=$?
    if [[ " ${qos_users[*]} " == *" $u "* ]]; then
        [[ "$out" =~ ^[0-9]+$ ]] && [[ "$(ended "$out")" == "$u|$a|$SLURM_TENANT_QOS|COMPLETED" ]] && ok=0 || ok=1
        check "sbatch as $u with QoS $SLURM_TENANT_QOS is accepted and runs" $ok "rc=$rc: $out"
    else
        ((rc != 0)) && grep -qi 'invalid qos' <<<"$out" && ok=0 || ok=1
        check "sbatch as $u with QoS $SLURM_TENANT_QOS is refused" $ok "rc=$rc: $out"
    fi
    # The capped QoS (no job fits its limit): refused over the limit to those allowed it.
    if [[ " ${qos_users[*]} " == *" $u "* ]]; then
        out=$(sbatch_as "$u" -q "$SLURM_CAPPED_QOS" 2>&1) && rc=0 || rc=$?
        ((rc != 0)) && grep -qi 'accounting/QOS policy' <<<"$out" && ok=0 || ok=1
        check "sbatch as $u with QoS $SLURM_CAPPED_QOS is refused over its limit" $ok "rc=$rc: $out"
    fi
done

# The users that existed before the tenants still submit, now in the default account.
ans=$(rest_submit "$SLURM_USER" /tmp 2>&1) || true
id=$(sed -n 's/.*"job_id": *\([0-9][0-9]*\).*/\1/p' <<<"$ans" | head -n1)
r=""
[[ -n "$id" ]] && r=$(ended "$id")
[[ "$r" == "$SLURM_USER|$SLURM_DEFAULT_ACCOUNT|normal|COMPLETED" ]] && ok=0 || ok=1
check "REST submit as $SLURM_USER (the tests' user) completes in $SLURM_DEFAULT_ACCOUNT" $ok "job '${id:-none}', sacct '$r', $(head -c 300 <<<"$ans")"
# Output to /dev/null: a root-owned /tmp/slurm-<id>.out would make a later job of slurm with the
# same id (ids restart at 1 on every cold start) fail with "Could not open stdout file".
id=$(slurm_chroot sh -c 'cd /tmp && exec sbatch --parsable -p "$1" -J tenant-check-root -o /dev/null --wrap true' sh "$SLURM_PARTITION" 2>&1) || true
r=""
[[ "$id" =~ ^[0-9]+$ ]] && r=$(ended "$id")
[[ "$r" == "root|$SLURM_DEFAULT_ACCOUNT|normal|COMPLETED" ]] && ok=0 || ok=1
check "sbatch as root completes in $SLURM_DEFAULT_ACCOUNT" $ok "job '$id', sacct '$r'"

printf '%s passed, %s failed\n' "$passed" "$failed"
((failed == 0))
