#!/usr/bin/env python3
"""What one job-poll cycle costs slurmrestd, per candidate strategy, at several job counts.

Driven by hack/measure-poll.sh (see there for usage). Submits cheap batch jobs held by a begin
time an hour ahead (they never run), measures response sizes and latencies of the calls each
strategy makes, and cancels its jobs at the end (one DELETE /jobs/ by job name).

Strategies:
  A  "update_time": GET /jobs?update_time=T every cycle. Unchanged: tiny; any change anywhere in
     the cluster: the FULL job list (slurmrestd's update_time is a change flag, not a delta).
  B  "state-first": GET /jobs/state/ (every job's id and state; no ids = all jobs) every cycle,
     then GET /job/{id} only for the jobs that are new or whose state changed.
Nodes: GET /nodes?update_time=T (304 when unchanged) in both.

Stdlib only. Body sizes are what the client reads (HTTP headers, ~150 B, not included).
"""

import argparse
import base64
import hashlib
import hmac
import http.client
import json
import sys
import threading
import time
import urllib.parse

API = "/slurm/v0.0.42"


def log(msg):
    print(f"[measure-poll] {msg}", file=sys.stderr, flush=True)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint_token(key, user="slurm", lifespan=3600):
    now = int(time.time())
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = b64url(
        json.dumps({"iat": now, "exp": now + lifespan, "sun": user}, separators=(",", ":")).encode()
    )
    signing_input = f"{header}.{claims}".encode()
    sig = b64url(hmac.new(key, signing_input, hashlib.sha256).digest())
    return f"{header}.{claims}.{sig}"


class Rest:
    """One keep-alive connection per thread."""

    def __init__(self, url, token, user):
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.headers = {
            "X-SLURM-USER-NAME": user,
            "X-SLURM-USER-TOKEN": token,
            "Content-Type": "application/json",
        }
        self.local = threading.local()

    def conn(self):
        if getattr(self.local, "conn", None) is None:
            self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        return self.local.conn

    def call(self, method, path, body=None):
        """(status, body bytes, seconds)."""
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            started = time.monotonic()
            try:
                c = self.conn()
                c.request(method, API + path, body=data, headers=self.headers)
                resp = c.getresponse()
                raw = resp.read()
                return resp.status, raw, time.monotonic() - started
            except (http.client.HTTPException, OSError):
                self.local.conn = None
                if attempt:
                    raise
        raise RuntimeError("unreachable")

    def json(self, method, path, body=None):
        status, raw, _ = self.call(method, path, body)
        if status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {raw[:300]!r}")
        return json.loads(raw)


def fmt_bytes(n):
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


class Measure:
    def __init__(self, rest, name, partition, threads):
        self.rest = rest
        self.name = name
        self.partition = partition
        self.threads = threads
        self.ours = []

    def submit_held(self, count):
        begin = int(time.time()) + 3600
        body = {
            "script": "#!/bin/sh\ntrue\n",
            "job": {
                "name": self.name,
                "partition": self.partition,
                "current_working_directory": "/tmp",
                "environment": ["PATH=/usr/bin:/bin"],
                "comment": f"measure-poll {self.name}",
                "begin_time": {"set": True, "number": begin},
            },
        }
        ids, errors = [], []
        lock = threading.Lock()
        per = [count // self.threads + (1 if i < count % self.threads else 0) for i in range(self.threads)]

        def worker(n):
            for _ in range(n):
                try:
                    out = self.rest.json("POST", "/job/submit", body)
                    with lock:
                        ids.append(out["job_id"])
                except Exception as e:  # noqa: BLE001 - reported below
                    with lock:
                        errors.append(str(e))

        started = time.monotonic()
        workers = [threading.Thread(target=worker, args=(n,)) for n in per]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            raise RuntimeError(f"{len(errors)} submits failed, first: {errors[0]}")
        self.ours.extend(ids)
        log(f"submitted {count} held jobs in {time.monotonic() - started:.1f} s")

    def cancel_all(self):
        status, raw, secs = self.rest.call("DELETE", "/jobs/", {"job_name": self.name})
        log(f"DELETE /jobs/ job_name={self.name}: HTTP {status} in {secs:.1f} s")
        if status != 200:
            # Left queued, these jobs would start within the hour (their begin time).
            raise RuntimeError(
                f"cancelling the jobs named {self.name} failed (HTTP {status}): "
                f"cancel them by hand (scancel --name={self.name}): {raw[:500]!r}")

    def settle(self, timeout=90):
        """Wait until /jobs?update_time=T answers 'unchanged' (other jobs and the scheduler quiet).
        Returns T, or None if the cluster never went quiet."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = int(time.time()) - 1
            time.sleep(1.5)
            status, raw, _ = self.rest.call("GET", f"/jobs/?update_time={t}")
            body = json.loads(raw)
            if status == 200 and not body.get("jobs"):
                return t
        return None

    def size(self, path):
        status, raw, secs = self.rest.call("GET", path)
        return status, len(raw), secs, raw

    def measure(self):
        _, _, _, raw = self.size("/jobs/state/")
        total = len({j["job_id"].split("_")[0] for j in json.loads(raw)["jobs"]})
        row = {"ours": len(self.ours), "total": total}
        t = self.settle()
        row["quiet"] = t is not None
        if t is None:
            log("the cluster did not go quiet: 'no change' rows are not quiet cycles")
            t = int(time.time()) - 1
        # Strategy A, no change.
        st, n, secs, _ = self.size(f"/jobs/?update_time={t}")
        row["a_quiet"] = (1, n, secs)
        # Strategy B, no change.
        st, n_state, secs_state, _ = self.size("/jobs/state/")
        row["b_quiet"] = (1, n_state, secs_state)
        # Nodes (same in both).
        st, n, secs, raw = self.size("/nodes/")
        node_count = len(json.loads(raw).get("nodes") or [])
        tn = int(time.time()) + 1
        time.sleep(1.2)
        st304, n304, _, _ = self.size(f"/nodes/?update_time={tn}")
        row["nodes"] = (node_count, n, st304, n304)
        # One change: cancel one of our held jobs.
        victim = self.ours.pop()
        t = int(time.time()) - 1
        time.sleep(1.1)
        self.rest.call("DELETE", f"/job/{victim}")
        st, n, secs, _ = self.size(f"/jobs/?update_time={t}")
        row["a_change"] = (1, n, secs)
        st, n_state, secs_state, _ = self.size("/jobs/state/")
        st, n_job, secs_job, _ = self.size(f"/job/{victim}")
        row["b_change"] = (2, n_state + n_job, secs_state + secs_job)
        row["job"] = n_job
        # A full resync (no update_time).
        st, n, secs, _ = self.size("/jobs/")
        row["full"] = (1, n, secs)
        return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--user", default="slurm")
    p.add_argument("--partition", default="debug")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--keep", action="store_true", help="leave the jobs (cancel later with --cancel NAME)")
    p.add_argument("--cancel", metavar="NAME", help="only cancel the jobs of an earlier --keep run")
    p.add_argument("counts", nargs="*", type=int, default=[10, 1000, 5000])
    args = p.parse_args()
    with open(args.key, "rb") as f:
        token = mint_token(f.read(), args.user)
    rest = Rest(args.url, token, args.user)
    if args.cancel:
        Measure(rest, args.cancel, args.partition, args.threads).cancel_all()
        return
    name = f"measure-poll-{int(time.time())}"
    m = Measure(rest, name, args.partition, args.threads)
    rows = []
    try:
        for count in sorted(args.counts):
            missing = count - len(m.ours)
            if missing > 0:
                m.submit_held(missing)
            log(f"measuring with {len(m.ours)} held jobs of ours")
            # measure() cancels one of ours; the next count's submit makes up for it.
            rows.append(m.measure())
    finally:
        if args.keep:
            log(f"kept the jobs: cancel them with --cancel {name}")
        else:
            m.cancel_all()

    def cell(c):
        reqs, n, secs = c
        return f"{reqs} req, {fmt_bytes(n)}, {secs * 1000:.0f} ms"

    print()
    print("| jobs in slurmctld (ours) | quiet cycle? | A no change | A one change | B no change | B one change | full /jobs | one /job/{id} | nodes: /nodes, 304 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        nodes, n_nodes, st304, n304 = r["nodes"]
        print(
            f"| {r['total']} ({r['ours']}) | {'yes' if r['quiet'] else 'NO'} | {cell(r['a_quiet'])} | "
            f"{cell(r['a_change'])} | {cell(r['b_quiet'])} | {cell(r['b_change'])} | "
            f"{cell(r['full'])} | {fmt_bytes(r['job'])} | {nodes} nodes: {fmt_bytes(n_nodes)}; HTTP {st304}, {n304} B |"
        )
    print()
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
