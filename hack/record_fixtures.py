#!/usr/bin/env python3
"""Records real slurmrestd (v0.0.42) responses as JSON fixtures.

Run through hack/record-fixtures.sh, which brings Slurm up and passes the env file. Stdlib only.

Each fixture is one JSON envelope:
  {"case": ..., "request": {"method", "path", "query", "body"}, "status", "content_type", "body"}
where "body" is the response body parsed as JSON, or the raw text as a JSON string.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

API = "/slurm/v0.0.42"


def log(msg):
    print(f"[record-fixtures] {msg}", file=sys.stderr, flush=True)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint_token(key, user="slurm", lifespan=3600):
    """HS256 JWT with the claims scontrol token uses: iat, exp, sun."""
    now = int(time.time())
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = b64url(
        json.dumps({"iat": now, "exp": now + lifespan, "sun": user}, separators=(",", ":")).encode()
    )
    signing_input = f"{header}.{claims}".encode()
    sig = b64url(hmac.new(key, signing_input, hashlib.sha256).digest())
    return f"{header}.{claims}.{sig}"


class Recorder:
    def __init__(self, env, out_dir, node_script, flavour):
        self.base = env["SLURM_REST_URL"]
        with open(env["SLURM_JWT_KEY"], "rb") as fh:
            self.key = fh.read()
        self.token = mint_token(self.key)
        self.out_dir = out_dir
        self.node_script = node_script
        self.flavour = flavour
        self.partition = env.get("SLURM_PARTITION", "debug")
        self.recorded = {}
        self.summary = []

    # -- HTTP -------------------------------------------------------------------------------
    def call(self, method, path, query=None, body=None, auth="good"):
        """Returns (request_dict, status, content_type, parsed_body)."""
        qs = ""
        if query:
            qs = urllib.parse.urlencode(query, doseq=True)
        url = self.base + path + (("?" + qs) if qs else "")
        headers = {"Accept": "application/json"}
        if auth == "good":
            headers["X-SLURM-USER-NAME"] = "slurm"
            headers["X-SLURM-USER-TOKEN"] = self.token
        elif auth == "bad":
            headers["X-SLURM-USER-NAME"] = "slurm"
            headers["X-SLURM-USER-TOKEN"] = mint_token(b"not-the-key-" * 3)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status = resp.status
                ctype = resp.headers.get("Content-Type", "")
                raw = resp.read()
        except urllib.error.HTTPError as err:
            status = err.code
            ctype = err.headers.get("Content-Type", "") if err.headers else ""
            raw = err.read()
        text = raw.decode("utf-8", errors="replace")
        try:
            parsed = json.loads(text) if text.strip() else text
        except ValueError:
            parsed = text
        request = {"method": method, "path": path, "query": qs or None, "body": body}
        return request, status, ctype, parsed

    def save(self, case, request, status, ctype, body):
        envelope = {
            "case": case,
            "request": request,
            "status": status,
            "content_type": ctype,
            "body": body,
        }
        path = os.path.join(self.out_dir, f"{case}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(envelope, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
        self.recorded[case] = envelope
        self.summary.append((case, status, describe(body)))
        log(f"{case}: {status} {describe(body)}")
        return body

    def rec(self, case, method, path, query=None, body=None, auth="good"):
        req, status, ctype, parsed = self.call(method, path, query, body, auth)
        return self.save(case, req, status, ctype, parsed), status

    # -- Slurm helpers ----------------------------------------------------------------------
    def job_body(self, script, **job):
        desc = {
            "partition": self.partition,
            "current_working_directory": "/tmp",
            "environment": ["PATH=/usr/bin:/bin", "FIXTURE=1"],
            "standard_output": "/tmp/fixture-%j.out",
        }
        desc.update(job)
        return {"script": script, "job": desc}

    def submit(self, name, script, case=None, **job):
        body = self.job_body(script, name=name, **job)
        if case:
            resp, status = self.rec(case, "POST", f"{API}/job/submit", body=body)
        else:
            _, status, _, resp = self.call("POST", f"{API}/job/submit", body=body)
        if status != 200 or not isinstance(resp, dict) or "job_id" not in resp:
            raise RuntimeError(f"submit {name} failed: {status} {describe(resp)}")
        return resp["job_id"]

    def get_job(self, job_id):
        req, status, ctype, body = self.call("GET", f"{API}/job/{job_id}")
        job = None
        if isinstance(body, dict) and body.get("jobs"):
            job = body["jobs"][0]
        if job and "COMPLETING" in job.get("job_state", []) and "job_completing" not in self.recorded:
            self.save("job_completing", req, status, ctype, body)
        return req, status, ctype, body, job

    def wait_job(self, job_id, pred, timeout=30, interval=0.05, what="condition"):
        deadline = time.time() + timeout
        while True:
            req, status, ctype, body, job = self.get_job(job_id)
            if job and pred(job):
                return req, status, ctype, body, job
            if time.time() > deadline:
                state = job and (job.get("job_state"), job.get("state_reason"))
                raise RuntimeError(f"job {job_id}: timed out waiting for {what}; last {state}")
            time.sleep(interval)

    def get_node(self, name):
        req, status, ctype, body = self.call("GET", f"{API}/node/{name}")
        node = None
        if isinstance(body, dict) and body.get("nodes"):
            node = body["nodes"][0]
        return req, status, ctype, body, node

    def wait_node(self, name, pred, timeout=30, what="condition"):
        deadline = time.time() + timeout
        while True:
            req, status, ctype, body, node = self.get_node(name)
            if node and pred(node):
                return req, status, ctype, body, node
            if time.time() > deadline:
                raise RuntimeError(
                    f"node {name}: timed out waiting for {what}; last {node and node.get('state')}"
                )
            time.sleep(0.05)

    def cancel(self, job_id):
        return self.call("DELETE", f"{API}/job/{job_id}")

    def node_script_run(self, *args):
        cmd = ["bash", self.node_script, "--flavour", self.flavour, *args]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-2000:]}")
        return res.stdout


def describe(body):
    if not isinstance(body, dict):
        return repr(body)[:80]
    parts = []
    errs = body.get("errors") or []
    if errs:
        parts.append("errors=" + ",".join(str(e.get("error_number")) for e in errs))
    warns = body.get("warnings") or []
    if warns:
        parts.append(f"warnings={len(warns)}")
    for key in ("jobs", "nodes", "partitions"):
        if key in body:
            items = body[key]
            parts.append(f"{key}={len(items)}")
            if key == "jobs" and len(items) == 1 and isinstance(items[0], dict):
                j = items[0]
                parts.append(f"state={j.get('job_state', j.get('state'))} reason={j.get('state_reason')}")
            if key == "nodes" and len(items) == 1:
                parts.append(f"state={items[0].get('state')}")
    if "status" in body and isinstance(body["status"], list):
        parts.append("status=" + ",".join(str(s.get("error", {}).get("code")) for s in body["status"]))
    if "job_id" in body:
        parts.append(f"job_id={body['job_id']}")
    return " ".join(parts)


def has(state):
    return lambda obj: state in (obj.get("job_state") or obj.get("state") or [])


def exactly(*states):
    return lambda obj: sorted(obj.get("job_state") or obj.get("state") or []) == sorted(states)


def node_free(node):
    st = node.get("state") or []
    return "IDLE" in st and "COMPLETING" not in st


def unchanged(r, what, case, tries=8):
    """GET /<what> then GET /<what>?update_time=<its last_update>; records the second answer,
    retrying (1.5 s apart) while it still carries items, i.e. something changed in between."""
    for _ in range(tries):
        _, _, _, first = r.call("GET", f"{API}/{what}")
        lu = (first.get("last_update") or {}).get("number")
        b, status = r.rec(case, "GET", f"{API}/{what}", query={"update_time": lu})
        if status == 304 or not (isinstance(b, dict) and b.get(what)):
            return
        time.sleep(1.5)
    log(f"{case}: every answer carried {what}; recorded the last one")


def record_all(r, skip_timeout=False):
    sleep1 = "#!/bin/bash\necho hello from $SLURM_JOB_ID on $SLURMD_NODENAME\nsleep 1\n"
    long_sleep = "#!/bin/bash\nsleep 300\n"

    # --- read-only ---------------------------------------------------------------------
    r.rec("ping", "GET", f"{API}/ping")
    r.rec("diag", "GET", f"{API}/diag")
    r.rec("nodes", "GET", f"{API}/nodes")
    # update_time = the previous answer's last_update. Right after start-up the node table still
    # changes; retry until an answer says "unchanged" (24.11: HTTP 304, empty body).
    unchanged(r, "nodes", "nodes_unchanged")
    r.rec("node_n1", "GET", f"{API}/node/n1")
    r.rec("node_unknown", "GET", f"{API}/node/nosuchnode")
    r.rec("partitions", "GET", f"{API}/partitions")
    unchanged(r, "partitions", "partitions_unchanged")

    # --- auth ------------------------------------------------------------------------------
    r.rec("auth_bad_token_ping", "GET", f"{API}/ping", auth="bad")
    r.rec("auth_bad_token_diag", "GET", f"{API}/diag", auth="bad")
    r.rec("auth_bad_token_nodes", "GET", f"{API}/nodes", auth="bad")
    r.rec("auth_bad_token_jobs", "GET", f"{API}/jobs", auth="bad")
    r.rec("auth_bad_token_partitions", "GET", f"{API}/partitions", auth="bad")
    r.rec("auth_bad_token_submit", "POST", f"{API}/job/submit", body=r.job_body(sleep1, name="bad-token"),
          auth="bad")
    r.rec("auth_missing_diag", "GET", f"{API}/diag", auth="none")
    r.rec("auth_missing_jobs", "GET", f"{API}/jobs", auth="none")

    # --- time limit (runs ~90 s in the background on n3) ----------------------------------
    timeout_id = None
    if not skip_timeout:
        timeout_id = r.submit("fixture-timeout", "#!/bin/bash\nsleep 600\n", case="submit_time_limit",
                              time_limit=1, required_nodes=["n3"])
        r.wait_job(timeout_id, has("RUNNING"), what="RUNNING")
        t_timeout_start = time.time()

    # --- submit, run, complete -------------------------------------------------------------
    ok_body = r.job_body(sleep1, name="fixture-sleep1", comment="slurm-operator-fixture:sleep1",
                         required_nodes=["n1"])
    resp, status = r.rec("submit_ok", "POST", f"{API}/job/submit", body=ok_body)
    ok_id = resp["job_id"]
    req, st, ct, body, _ = r.wait_job(ok_id, has("RUNNING"), what="RUNNING", interval=0.02)
    r.save("job_running", req, st, ct, body)
    req, st, ct, body, _ = r.wait_job(ok_id, exactly("COMPLETED"), what="COMPLETED", interval=0.01)
    r.save("job_completed", req, st, ct, body)
    r.rec("cancel_completed", "DELETE", f"{API}/job/{ok_id}")

    # --- submit errors ---------------------------------------------------------------------
    r.rec("submit_invalid_partition", "POST", f"{API}/job/submit",
          body=r.job_body(sleep1, name="bad-partition", partition="nosuchpartition"))
    r.rec("submit_invalid_feature", "POST", f"{API}/job/submit",
          body=r.job_body(sleep1, name="bad-feature", constraints="nosuchfeature"))
    no_env = r.job_body(sleep1, name="no-environment")
    del no_env["job"]["environment"]
    r.rec("submit_no_environment", "POST", f"{API}/job/submit", body=no_env)
    no_cwd = r.job_body(sleep1, name="no-cwd")
    del no_cwd["job"]["current_working_directory"]
    r.rec("submit_no_cwd", "POST", f"{API}/job/submit", body=no_cwd)
    r.rec("submit_unknown_field", "POST", f"{API}/job/submit",
          body=r.job_body("#!/bin/bash\ntrue\n", name="unknown-field", bogus_field=1, required_nodes=["n1"]))

    # --- failure ---------------------------------------------------------------------------
    fail_id = r.submit("fixture-exit3", "#!/bin/bash\necho failing\nexit 3\n", required_nodes=["n2"])
    req, st, ct, body, _ = r.wait_job(fail_id, exactly("FAILED"), what="FAILED")
    r.save("job_failed_exit3", req, st, ct, body)

    # --- cancel while running --------------------------------------------------------------
    c_id = r.submit("fixture-cancel-running", long_sleep, required_nodes=["n1"])
    r.wait_job(c_id, has("RUNNING"), what="RUNNING")
    r.rec("cancel_ok", "DELETE", f"{API}/job/{c_id}")
    req, st, ct, body, _ = r.wait_job(c_id, exactly("CANCELLED"), what="CANCELLED")
    r.save("job_cancelled_running", req, st, ct, body)

    # --- all nodes busy: pending, jobs listing, state query, drain ----------------------------
    r.wait_node("n1", node_free, what="IDLE")
    r.wait_node("n2", node_free, what="IDLE")
    f1 = r.submit("fixture-filler-n1", long_sleep, required_nodes=["n1"])
    f2 = r.submit("fixture-filler-n2", long_sleep, required_nodes=["n2"])
    r.wait_job(f1, has("RUNNING"), what="RUNNING")
    r.wait_job(f2, has("RUNNING"), what="RUNNING")
    if skip_timeout:
        f3 = r.submit("fixture-filler-n3", long_sleep, required_nodes=["n3"])
        r.wait_job(f3, has("RUNNING"), what="RUNNING")
    p_id = r.submit("fixture-pending", sleep1)
    req, st, ct, body, _ = r.wait_job(p_id, lambda j: j.get("state_reason") == "Resources",
                                      what="reason Resources", timeout=20)
    r.save("job_pending", req, st, ct, body)

    r.rec("jobs", "GET", f"{API}/jobs")
    unchanged(r, "jobs", "jobs_unchanged")
    r.rec("jobs_state", "GET", f"{API}/jobs/state/", query=[("job_id", ok_id), ("job_id", f1),
                                                              ("job_id", fail_id)])
    r.rec("jobs_state_csv", "GET", f"{API}/jobs/state/", query={"job_id": f"{ok_id},{f1}"})

    r.rec("cancel_pending_ok", "DELETE", f"{API}/job/{p_id}")
    req, st, ct, body, _ = r.wait_job(p_id, has("CANCELLED"), what="CANCELLED")
    r.save("job_cancelled_pending", req, st, ct, body)

    # drain n2 while its filler runs -> ALLOCATED+DRAIN
    r.rec("drain_busy", "POST", f"{API}/node/n2", body={"state": ["DRAIN"], "reason": "fixture: drain busy"})
    req, st, ct, body, _ = r.get_node("n2")
    r.save("node_draining", req, st, ct, body)
    # free n1, then drain it while idle -> IDLE+DRAIN
    r.cancel(f1)
    r.wait_job(f1, exactly("CANCELLED"), what="CANCELLED")
    r.wait_node("n1", node_free, what="IDLE")
    r.rec("drain_idle", "POST", f"{API}/node/n1", body={"state": ["DRAIN"], "reason": "fixture: drain idle"})
    req, st, ct, body, _ = r.wait_node("n1", has("DRAIN"), what="DRAIN")
    r.save("node_drained", req, st, ct, body)
    r.rec("resume_ok", "POST", f"{API}/node/n1", body={"state": ["RESUME"]})
    r.rec("node_after_resume", "GET", f"{API}/node/n1")
    req, st, ct, body, _ = r.wait_node("n1", exactly("IDLE"), what="IDLE")
    r.save("node_resumed_idle", req, st, ct, body)
    r.rec("resume_not_drained", "POST", f"{API}/node/n1", body={"state": ["RESUME"]})
    r.rec("update_unknown_node", "POST", f"{API}/node/nosuchnode", body={"state": ["DRAIN"], "reason": "x"})
    # n2's job ends -> IDLE+DRAIN, then resume
    r.cancel(f2)
    req, st, ct, body, _ = r.wait_node("n2", lambda n: node_free(n) and "DRAIN" in n["state"],
                                       what="IDLE+DRAIN")
    r.save("node_drained_after_job", req, st, ct, body)
    r.call("POST", f"{API}/node/n2", body={"state": ["RESUME"]})
    if skip_timeout:
        r.cancel(f3)

    # --- unknown ids -----------------------------------------------------------------------
    r.rec("cancel_unknown", "DELETE", f"{API}/job/999999")
    r.rec("job_unknown", "GET", f"{API}/job/999999")

    # --- dynamic node ----------------------------------------------------------------------
    dyn = "fixdyn1"
    r.node_script_run("stop", dyn, "--delete")
    r.node_script_run("start", dyn, "--conf", "CPUs=1 RealMemory=500 Feature=fixdyn")
    req, st, ct, body, _ = r.wait_node(dyn, node_free, what="IDLE")
    r.save("node_dynamic_idle", req, st, ct, body)
    d_id = r.submit("fixture-dynamic", long_sleep, constraints="fixdyn")
    r.wait_job(d_id, has("RUNNING"), what="RUNNING")
    req, st, ct, body, _ = r.get_node(dyn)
    r.save("node_dynamic_allocated", req, st, ct, body)
    r.rec("delete_node_busy", "DELETE", f"{API}/node/{dyn}")
    r.cancel(d_id)
    r.wait_job(d_id, exactly("CANCELLED"), what="CANCELLED")
    r.wait_node(dyn, node_free, what="IDLE")
    r.rec("delete_node_ok", "DELETE", f"{API}/node/{dyn}")
    r.rec("node_deleted", "GET", f"{API}/node/{dyn}")
    r.node_script_run("stop", dyn)

    # --- array job with one failing task -----------------------------------------------------
    r.wait_node("n1", exactly("IDLE"), what="IDLE")
    r.wait_node("n2", exactly("IDLE"), what="IDLE")
    arr_script = ("#!/bin/bash\necho task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID\n"
                  "if [ \"$SLURM_ARRAY_TASK_ID\" = 2 ]; then exit 1; fi\nsleep 1\n")
    arr_body = r.job_body(arr_script, name="fixture-array", array="0-3",
                          standard_output="/tmp/fixture-%A_%a.out")
    resp, _ = r.rec("array_submit", "POST", f"{API}/job/submit", body=arr_body)
    arr_id = resp["job_id"]
    r.rec("array_job_pending", "GET", f"{API}/job/{arr_id}")
    deadline = time.time() + 60
    while True:
        _, _, _, body = r.call("GET", f"{API}/jobs")
        tasks = [j for j in body.get("jobs", []) if (j.get("array_job_id") or {}).get("number") == arr_id]
        states = [j.get("job_state") for j in tasks]
        if len(tasks) >= 4 and all(("COMPLETED" in s or "FAILED" in s) and "COMPLETING" not in s
                                   for s in states):
            break
        if time.time() > deadline:
            raise RuntimeError(f"array job {arr_id} did not finish: {states}")
        time.sleep(0.2)
    r.rec("array_jobs", "GET", f"{API}/jobs")
    r.rec("array_job", "GET", f"{API}/job/{arr_id}")
    r.rec("array_jobs_state", "GET", f"{API}/jobs/state/", query=[("job_id", arr_id)])

    # --- COMPLETING is transient: retry with short jobs until one answer shows it -------------
    for attempt in range(15):
        if "job_completing" in r.recorded:
            break
        c_id = r.submit(f"fixture-completing-{attempt}", "#!/bin/bash\nsleep 0.5\n", required_nodes=["n1"])
        r.wait_job(c_id, lambda j: "COMPLETED" in j.get("job_state", []) and
                   "COMPLETING" not in j.get("job_state", []), what="COMPLETED", interval=0.005)

    # --- time limit -------------------------------------------------------------------------
    if timeout_id is not None:
        left = 150 - (time.time() - t_timeout_start)
        log(f"waiting up to {int(left)} s for job {timeout_id} to hit its time limit")
        req, st, ct, body, _ = r.wait_job(timeout_id, exactly("TIMEOUT"), what="TIMEOUT",
                                          timeout=max(left, 10), interval=0.5)
        r.save("job_timeout", req, st, ct, body)
        log(f"TIMEOUT {time.time() - t_timeout_start:.0f} s after the job started")

    r.rec("jobs_final", "GET", f"{API}/jobs")
    record_extra(r)
    if "job_completing" not in r.recorded:
        log("job_completing: not caught this run")


def record_extra(r):
    """Cases that need no particular cluster state and leave none behind, so they can also be
    added to an existing recording (--extra-only) without --fresh."""
    # A versioned path this slurmrestd does not serve: 404 text/plain, no Slurm error number.
    # (v0.0.39 was last served by Slurm 23.11.) The fixture tests replay it at the v0.0.42 path,
    # i.e. as the answer of a slurmrestd that does not serve v0.0.42.
    r.rec("unsupported_version_diag", "GET", "/slurm/v0.0.39/diag")
    # /diag through another data_parser this slurmrestd serves: same shape, but
    # meta.plugin.data_parser names that version, which the facade must refuse.
    for version in ("v0.0.41", "v0.0.40", "v0.0.43", "v0.0.44"):
        _, status, _, _ = r.call("GET", f"/slurm/{version}/diag")
        if status == 200:
            r.rec("diag_other_data_parser", "GET", f"/slurm/{version}/diag")
            break
    else:
        log("diag_other_data_parser: no other data_parser version is served")
    # HTTP 200 whose errors[] says the submit was refused (error_number 0) and no job_id.
    r.rec("submit_hetjob_empty", "POST", f"{API}/job/submit", body={"jobs": []})
    # A value slurmrestd's parser refuses without a number of its own: -1, its source the
    # value's path, no job.
    r.rec("submit_bad_value", "POST", f"{API}/job/submit",
          body=r.job_body("#!/bin/bash\ntrue\n", name="bad-value", cpu_frequency="bogus"))
    # An unknown flag: the parser's error (9207), and the job made all the same (held here,
    # cancelled at once).
    made, _ = r.rec("submit_unknown_flag", "POST", f"{API}/job/submit",
                    body=r.job_body("#!/bin/bash\ntrue\n", name="unknown-flag",
                                    mail_type=["BOGUS"], hold=True))
    if isinstance(made, dict) and made.get("job_id"):
        r.cancel(made["job_id"])
    else:
        log(f"submit_unknown_flag: no job_id: {describe(made)}")
    # The same with a partition slurmctld does not have: the parser's error, then slurmctld's
    # refusal, and no job.
    r.rec("submit_unknown_flag_refused", "POST", f"{API}/job/submit",
          body=r.job_body("#!/bin/bash\ntrue\n", name="unknown-flag-refused",
                          mail_type=["BOGUS"], partition="nosuchpartition"))
    # The poller's query: /jobs/state/ without ids, with a held (pending) array in the queue.
    held = r.submit("fixture-held-array", "#!/bin/bash\ntrue\n", array="0-2", hold=True)
    try:
        r.rec("jobs_state_all", "GET", f"{API}/jobs/state/")
    finally:
        r.cancel(held)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--env", required=True, help="env file written by slurm-up.sh")
    ap.add_argument("--out", required=True, help="output directory (tests/fixtures/<major.minor>)")
    ap.add_argument("--node-script", required=True)
    ap.add_argument("--flavour", required=True)
    ap.add_argument("--skip-timeout", action="store_true", help="skip the ~90 s time-limit case")
    ap.add_argument("--extra-only", action="store_true",
                    help="record only the state-independent extra cases, keeping the other fixtures")
    args = ap.parse_args()

    env = {}
    with open(args.env, encoding="utf-8") as fh:
        for line in fh:
            m = re.match(r"^([A-Z_]+)=(.*)$", line.strip())
            if m:
                env[m.group(1)] = m.group(2)
    os.makedirs(args.out, exist_ok=True)
    if not args.extra_only:
        for name in os.listdir(args.out):
            if name.endswith(".json"):
                os.unlink(os.path.join(args.out, name))
    r = Recorder(env, args.out, args.node_script, args.flavour)
    t0 = time.time()
    try:
        if args.extra_only:
            record_extra(r)
        else:
            record_all(r, skip_timeout=args.skip_timeout)
    finally:
        log(f"{len(r.recorded)} fixtures in {args.out} ({time.time() - t0:.0f} s)")
    width = max(len(c) for c, _, _ in r.summary)
    seen = set()
    for case, status, desc in r.summary:
        if case in seen:
            continue
        seen.add(case)
        env_case = r.recorded[case]
        print(f"{case:<{width}}  {env_case['status']}  {describe(env_case['body'])}")


if __name__ == "__main__":
    main()
