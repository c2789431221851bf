"""Run what the slurm-cluster chart renders on a REAL Slurm, without Kubernetes.

hack/slurm-up.sh keeps a Debian root filesystem with Slurm (24.11 for `trixie`) under
/var/tmp/slurm-operator/<flavour>/rootfs. This check takes a `helm template` of the chart and
runs, inside that root (chroot, as root, on 127.0.0.1):

* slurmctld with the chart's slurm.conf and the chart-generated slurm.key and JWT key (from the
  rendered Secrets), started like the StatefulSet starts it (`slurmctld -D`, SLURM_CONF);
* one slurmd per SlurmNodeSet, started with the SlurmNodeSet pod's command line (configless
  `--conf-server`, dynamic `-Z`, `-N <pod name>`, `--conf <features, CPUs, memory>`);
* slurmrestd with the Deployment's command line (`-a rest_auth/jwt -s ...`) and environment
  (SLURM_JWT=daemon, SLURMRESTD_JSON);

then checks that every node registered with the SlurmNodeSet's features, CPUs and memory and sits
in the SlurmNodeSet's partitions, and that a job submitted through slurmrestd with a token minted
(as the operator does) from the key the SlurmCluster names, the chart's labelled copy in the
operator's credentials namespace, for the SlurmCluster's auth.jwt.user, runs to COMPLETED.

What differs from the pods, so that it can run on one host next to the other local Slurms:
SlurmctldHost (this host's name and 127.0.0.1), the ports (free ones), the state/spool/pid
paths (a temporary directory; SlurmdSpoolDir gets %n), and each slurmd gets its own Port= in
--conf. Everything else is the chart's text.

Each daemon also gets its own /run, as each pod has: a private mount namespace with an empty
directory bound over the root's /run. Slurm (24.11, 26.05) puts its auth socket at a fixed path,
/run/slurm/sack.socket for every slurmd (/run/slurmctld/... for slurmctld), with no option to move
it (only sackd reads RUNTIME_DIRECTORY), and unlinks whatever is there before binding: two slurmd
starting at once in one root make one die with "init_sack_conmgr: [unix:/run/slurm/sack.socket]
Unable to bind UNIX socket: Address already in use", and a smoke daemon would replace the socket
of the local Slurm running in the same root (hack/slurm-up.sh), leaving it dead after the test.
Where mount namespaces are not available the slurmd are started one after the other instead,
each once it has written its pid file (which it does after binding), as hack/slurm-up.sh does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable

FLAVOUR = os.environ.get("SLURM_FLAVOUR", "trixie")
STATE_BASE = Path("/var/tmp/slurm-operator") if Path("/var/tmp").is_dir() else Path(os.environ.get("TMPDIR", "/tmp")) / "slurm-operator"
ROOTFS = STATE_BASE / FLAVOUR / "rootfs"


def unavailable() -> str | None:
    """Why the smoke test cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (chroot)"
    if not all(os.path.lexists(ROOTFS / "usr/sbin" / d) for d in ("slurmctld", "slurmd", "slurmrestd")):
        return f"no Slurm root filesystem at {ROOTFS} (run hack/slurm-up.sh)"
    if not (ROOTFS / "proc/self/status").exists():
        return f"{ROOTFS}/proc is not mounted (run hack/slurm-up.sh)"
    if shutil.which("chroot") is None:
        return "no chroot command"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def own_run_dirs_work(probe_dir: Path) -> bool:
    """True when a daemon can get its own /run (unshare(1) and a bind mount in a new namespace)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe_dir.mkdir(parents=True, exist_ok=True)
    try:
        p = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "mount", "--bind",
                            str(probe_dir), str(ROOTFS / "run")], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        probe_dir.rmdir()
    return p.returncode == 0


def mint_jwt(key: bytes, user: str, lifetime: int = 300) -> str:
    def b64(x: bytes) -> bytes:
        return base64.urlsafe_b64encode(x).rstrip(b"=")
    now = int(time.time())
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"iat": now, "exp": now + lifetime, "sun": user}).encode())
    sig = b64(hmac.new(key, head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + sig).decode()


def run(docs: list[dict], fail: Callable[[str], None]) -> str:
    """Run the rendered chart `docs` on the local Slurm; call fail(msg) (which raises) on error."""
    def one(kind: str, suffix: str = "") -> dict:
        found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
        if len(found) != 1:
            fail(f"expected one {kind} *{suffix}, found {len(found)}")
        return found[0]

    conf_text = one("ConfigMap", "-slurm-conf")["data"]["slurm.conf"]
    sts = one("StatefulSet", "-slurmctld")
    release_ns = sts["metadata"]["namespace"]
    secrets = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs if d["kind"] == "Secret"}

    def mounted_secret(path: str) -> tuple[str, str]:
        """The (Secret, key) slurmctld's pod projects to `path` in /etc/slurm."""
        for v in sts["spec"]["template"]["spec"]["volumes"]:
            for src in (v.get("projected") or {}).get("sources", []):
                for item in (src.get("secret") or {}).get("items", []):
                    if item["path"] == path:
                        return src["secret"]["name"], item["key"]
        fail(f"slurmctld mounts no Secret at {path}")
        raise AssertionError

    def secret_value(namespace: str, name: str, key: str) -> bytes:
        if (namespace, name) not in secrets:
            fail(f"Secret {namespace}/{name} is not rendered")
        return base64.b64decode(secrets[(namespace, name)]["data"][key])

    slurm_key = secret_value(release_ns, *mounted_secret("slurm.key"))
    jwt_key = secret_value(release_ns, *mounted_secret("jwt_hs256.key"))
    # The operator signs with the key its SlurmCluster names, read from its credentials namespace
    # (the chart's labelled copy): it must be the key slurmctld verifies with.
    jwt = one("SlurmCluster")["spec"]["auth"]["jwt"]
    cred_ns = next((ns for (ns, name), d in secrets.items() if name == jwt["keySecretRef"]["name"]
                    and (d["metadata"].get("labels") or {}).get("slurm.rs/credentials") == "true"), None)
    if cred_ns is None:
        fail(f"no labelled Secret {jwt['keySecretRef']['name']} rendered for the SlurmCluster")
    operator_key = secret_value(cred_ns, jwt["keySecretRef"]["name"], jwt["keySecretRef"]["key"])
    operator_user = jwt["user"]
    ctld = sts["spec"]["template"]["spec"]["containers"][0]
    restd_pod = one("Deployment", "-slurmrestd")["spec"]["template"]["spec"]
    restd = restd_pod["containers"][0]
    nodesets = [d for d in docs if d["kind"] == "SlurmNodeSet"]
    if not nodesets:
        fail("no SlurmNodeSets rendered")

    host = socket.gethostname().split(".")[0]
    ctld_port, slurmd_port, restd_port = free_port(), free_port(), free_port()
    work = Path(f"/tmp/helm-smoke-{os.getpid()}")  # inside the root filesystem
    root_work = ROOTFS / work.relative_to("/")
    if root_work.exists():
        shutil.rmtree(root_work)
    for sub in ("etc", "state", "run", "log"):
        (root_work / sub).mkdir(parents=True)

    # slurm.conf: the chart's text, with only host/ports/paths changed for a shared host.
    changes = {
        "SlurmctldHost": f"{host}(127.0.0.1)", "SlurmctldPort": str(ctld_port), "SlurmdPort": str(slurmd_port),
        "StateSaveLocation": f"{work}/state", "SlurmdSpoolDir": f"{work}/spool-%n",
        "SlurmctldPidFile": f"{work}/run/slurmctld.pid", "SlurmdPidFile": f"{work}/run/slurmd-%n.pid",
        # The key's path only: the chart's other parameters (disable_token_creation) stay.
        "AuthAltParameters": re.sub(r"jwt_key=[^,]*", f"jwt_key={work}/etc/jwt_hs256.key",
                                    next(line.split("=", 1)[1] for line in conf_text.splitlines()
                                         if line.startswith("AuthAltParameters="))),
    }
    lines = []
    for line in conf_text.splitlines():
        key = line.split("=", 1)[0]
        lines.append(f"{key}={changes[key]}" if key in changes else line)
    (root_work / "etc/slurm.conf").write_text("\n".join(lines) + "\n")
    (root_work / "etc/slurm.key").write_bytes(slurm_key)
    (root_work / "etc/jwt_hs256.key").write_bytes(jwt_key)
    subprocess.run(["chroot", str(ROOTFS), "chown", "-R", "slurm:slurm", str(work)], check=True)
    for k in ("slurm.key", "jwt_hs256.key"):
        os.chmod(root_work / "etc" / k, 0o600)
    env_conf = f"SLURM_CONF={work}/etc/slurm.conf"
    # scontrol authenticates with a JWT from the chart's key: with auth/slurm it would fetch a
    # credential from whichever sack socket (/run/slurm*/sack.socket) the shared root has,
    # possibly the local Slurm's, signed with another key.
    def client_env() -> list[str]:
        return [env_conf, f"SLURM_JWT={mint_jwt(jwt_key, 'slurm')}"]

    procs: list[tuple[str, subprocess.Popen]] = []
    own_run = own_run_dirs_work(root_work / "run-probe")

    def start(name: str, argv: list[str], env: list[str]) -> None:
        log = open(root_work / "log" / f"{name}.log", "wb")
        cmd = ["chroot", str(ROOTFS), "env", *env, *argv]
        if own_run:
            # The bind mount lives as long as the daemon's namespace (its job steps included); sh
            # and unshare exec, so the Popen is the daemon itself (terminate() reaches it).
            run_dir = root_work / f"run-{name}"
            run_dir.mkdir()
            cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                   'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(run_dir), str(ROOTFS / "run"), *cmd]
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        procs.append((name, p))

    def logs() -> str:
        return "\n".join(f"--- {n}.log (tail)\n" + "\n".join((root_work / "log" / f"{n}.log").read_text(errors="replace").splitlines()[-8:])
                         for n, _ in procs)

    def scontrol(*args: str) -> str:
        return subprocess.run(["chroot", str(ROOTFS), "env", *client_env(), "scontrol", *args],
                              capture_output=True, text=True, timeout=20).stdout

    try:
        # slurmctld as the StatefulSet runs it.
        if ctld["command"] != ["slurmctld"] or ctld["args"] != ["-D"]:
            fail(f"slurmctld command changed: {ctld['command']} {ctld['args']}; update this smoke test")
        start("slurmctld", ["slurmctld", *ctld["args"]], [env_conf])
        deadline = time.time() + 20
        while "UP" not in subprocess.run(["chroot", str(ROOTFS), "env", *client_env(), "scontrol", "ping"],
                                         capture_output=True, text=True).stdout:
            if time.time() > deadline or procs[0][1].poll() is not None:
                fail("slurmctld did not come up with the chart's slurm.conf\n" + logs())
            time.sleep(0.2)

        # Only SlurmUser may mint tokens: a tenant's job (here a token for `nobody`, as a job's
        # script would authenticate) must not get itself one that bypasses the operator.
        def token_as(user: str) -> subprocess.CompletedProcess:
            return subprocess.run(["chroot", str(ROOTFS), "env", env_conf,
                                   f"SLURM_JWT={mint_jwt(jwt_key, user)}", "scontrol", "token", "lifespan=600"],
                                  capture_output=True, text=True, timeout=20)
        slurm_user = next(line.split("=", 1)[1] for line in conf_text.splitlines() if line.startswith("SlurmUser="))
        if "SLURM_JWT=" not in token_as(slurm_user).stdout:
            fail("SlurmUser cannot mint a token with `scontrol token`\n" + logs())
        minted = token_as("nobody")
        if minted.returncode == 0 or "SLURM_JWT=" in minted.stdout:
            fail(f"a user other than SlurmUser minted a token: {minted.stdout}{minted.stderr}")

        # One slurmd per SlurmNodeSet, with the pod's command line.
        expected = {}
        for ns in nodesets:
            c = next(c for c in ns["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd")
            pod = ns["metadata"]["name"] + "-0"
            argv = [c["command"][0]] + [a.replace("$(POD_NAME)", pod) for a in c["args"]]
            i = argv.index("--conf-server")
            argv[i + 1] = f"127.0.0.1:{ctld_port}"
            j = argv.index("--conf")
            argv[j + 1] += f" Port={free_port()}"
            node_etc = root_work / f"etc-{pod}"
            node_etc.mkdir()
            shutil.copy(root_work / "etc/slurm.key", node_etc / "slurm.key")  # as the init container does
            (root_work / f"spool-{pod}").mkdir()
            start(pod, argv, [f"SLURM_CONF={work}/etc-{pod}/slurm.conf"])
            expected[pod] = ns["spec"]["slurm"]
            if not own_run:
                # Shared /run: the next slurmd only once this one holds the socket (pid file).
                pid_file, p = root_work / "run" / f"slurmd-{pod}.pid", procs[-1][1]
                deadline = time.time() + 30
                while not (pid_file.exists() and pid_file.stat().st_size > 0):
                    if p.poll() is not None or time.time() > deadline:
                        fail(f"slurmd {pod} did not write {pid_file.name}\n" + logs())
                    time.sleep(0.05)

        deadline = time.time() + 30
        for pod, want in expected.items():
            while True:
                out = scontrol("show", "node", pod)
                if "State=IDLE" in out:
                    break
                if time.time() > deadline:
                    fail(f"node {pod} did not register idle:\n{out}\n" + logs())
                time.sleep(0.3)
            fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
            feats = fields.get("AvailableFeatures", "").split(",")
            if sorted(feats) != sorted(want["features"]):
                fail(f"{pod}: features {feats}, SlurmNodeSet says {want['features']}")
            parts = fields.get("Partitions", "").split(",")
            if not set(want["partitions"]) <= set(parts):
                fail(f"{pod}: partitions {parts}, SlurmNodeSet says {want['partitions']}")
            if "cpus" in want and fields.get("CPUTot") != str(want["cpus"]):
                fail(f"{pod}: CPUTot={fields.get('CPUTot')}, SlurmNodeSet says cpus={want['cpus']}")

        # slurmrestd as the Deployment runs it (as its pod's runAsUser/runAsGroup, bound to loopback).
        # Numeric ids: slurmrestd 26.05 fails on "-u nobody" ("Unable to resolve user: nobody")
        # but takes 65534.
        argv = [restd["command"][0]] + [a if not a.startswith("0.0.0.0:") else f"127.0.0.1:{restd_port}" for a in restd["args"]]
        env = [f"{e['name']}={e['value']}" for e in restd["env"] if e["name"] != "SLURM_CONF"] + [env_conf]
        sc = restd_pod.get("securityContext", {})
        if "runAsUser" not in sc or "runAsGroup" not in sc:
            fail(f"slurmrestd pod has no runAsUser/runAsGroup: {sc}; update this smoke test")
        start("slurmrestd", [argv[0], "-u", str(sc["runAsUser"]), "-g", str(sc["runAsGroup"]), *argv[1:]], env)
        token = mint_jwt(operator_key, operator_user)
        headers = {"X-SLURM-USER-NAME": operator_user, "X-SLURM-USER-TOKEN": token, "Content-Type": "application/json"}

        def rest(method: str, path: str, body: dict | None = None) -> dict:
            req = urllib.request.Request(f"http://127.0.0.1:{restd_port}/slurm/v0.0.42/{path}", method=method,
                                         headers=headers, data=json.dumps(body).encode() if body else None)
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.load(r)

        deadline = time.time() + 15
        while True:
            try:
                nodes = rest("GET", "nodes")
                break
            except OSError:
                if time.time() > deadline:
                    fail("slurmrestd did not answer with the chart's arguments\n" + logs())
                time.sleep(0.2)
        names = sorted(n["name"] for n in nodes["nodes"])
        if names != sorted(expected):
            fail(f"slurmrestd lists nodes {names}, want {sorted(expected)}")
        partition = next(iter(expected.values()))["partitions"][0]
        sub = rest("POST", "job/submit", {"job": {
            "name": "helm-smoke", "partition": partition, "current_working_directory": "/tmp",
            "environment": ["PATH=/usr/bin:/bin"], "standard_output": f"{work}/job-%j.out",
            "script": "#!/bin/sh\necho smoke on $SLURMD_NODENAME\n"}})
        job_id = sub.get("job_id")
        if not job_id:
            fail(f"submit failed: {sub.get('errors')}")
        deadline = time.time() + 30
        while True:
            state = rest("GET", f"job/{job_id}")["jobs"][0]["job_state"]
            if "COMPLETED" in state:
                break
            if time.time() > deadline or any(s in state for s in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")):
                fail(f"job {job_id} ended {state}\n" + logs())
            time.sleep(0.3)
        release = scontrol("version").strip()
        how = "each daemon with its own /run" if own_run else "shared /run, slurmd started one by one"
        return f"{release}: {len(expected)} dynamic nodes in their partitions, REST job {job_id} COMPLETED ({how})"
    finally:
        for _, p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for _, p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        shutil.rmtree(root_work, ignore_errors=True)
