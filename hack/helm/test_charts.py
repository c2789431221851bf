#!/usr/bin/env python3
"""Tests for the Helm charts in helm/ (run by hack/helm-test.sh, which provides helm and a venv).

Each check prints `PASS name` or `FAIL name: why`; the last line is `N passed, N failed`.

  lint        helm lint --strict, defaults and every ci/*.yaml
  render      helm template (defaults and every ci/*.yaml) and validate EVERY object: built-in
              kinds with kubernetes-validate (strict, Kubernetes K8S_VERSIONS), slurm.rs kinds
              with our CRDs' openAPIV3Schema and their CEL rules (hack/helm/crdschema.py),
              SlurmNodeSet pod templates also as Pods; cross-references (volumes -> ConfigMaps/
              Secrets/PVCs, selectors -> labels, Services -> pods)
  crds        the operator chart's CRDs are crds/ byte for byte, and render unchanged
  rbac        rendered RBAC == helm/slurm-operator/files/rbac-rules.yaml in every mode; every
              Kubernetes kind the Rust code opens an Api<...> for has a rule; Secrets only
              through a Role in the credentials namespace (no ClusterRole grants them); the
              tenant/admin ClusterRoles for people grant what they say, aggregated as configured
  operator    Deployment security/probes/args per mode; NetworkPolicy (metricsFrom, helm test
              Pod); the docs' alert list and RBAC verbs match files/
  services    slurmrestd and the metrics Service stay ClusterIP unless allowExternal
  pods        no chart/version label in any pod template; a chart version bump changes none
  cluster     slurm.conf, SlurmNodeSets, slurmd command line, SlurmCluster, its credentials
              Secret in the operator's credentials namespace, accounting wiring agree
  netpol      slurm-cluster's NetworkPolicies: none unless enabled; evaluated on a model of the
              render's pods and the pods around them, every connection the daemons make is
              admitted on the port their configuration names, and nothing else
  secrets     keys are generated, reused from the live Secret (lookup), existingSecret honoured
  schema      bad values fail with a message that names the value; slurm-cluster's image tags
              are strings only; its partition names and scaleIn.drainTimeout render exactly
              when the SlurmNodeSet CRD takes them; an upgrade changing cluster.name (the
              SlurmNodeSets' immutable clusterName) fails at render (lookup, faked offline)
  notes       the YAML that NOTES.txt tells users to apply validates against the CRDs
  examples    every manifest under examples/ validates (CRDs with their CEL rules, Kubernetes
              schemas); examples/tenancy/ is consistent (names, namespaces, labels, access) and
              its RBAC gives the tenant what its README says, and no more
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import traceback
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crdschema import CrdValidator  # noqa: E402

import celpy  # noqa: E402
import kubernetes_validate  # noqa: E402
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "helm" / "slurm-operator"
CLUSTER = ROOT / "helm" / "slurm-cluster"
RULES_FILE = OPERATOR / "files" / "rbac-rules.yaml"
# The charts' kubeVersion floor and the version the bundled kubectl speaks.
K8S_VERSIONS = os.environ.get("HELM_TEST_K8S_VERSIONS", "1.30 1.33").split()
RELEASE_NS = "slurm-system"

HELM = "helm"


# --- plumbing ---------------------------------------------------------------------------------

class Failed(Exception):
    pass


def ensure(cond: bool, msg: str) -> None:
    if not cond:
        raise Failed(msg)


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([HELM, *args], capture_output=True, text=True, env={**os.environ, "KUBECONFIG": "/nonexistent"})


_render_cache: dict[tuple, list[dict]] = {}


def render(chart: Path, values: tuple[str, ...] = (), sets: tuple[str, ...] = (), release: str = "test",
           namespace: str = RELEASE_NS, cache: bool = True) -> list[dict]:
    key = (str(chart), values, sets, release, namespace)
    if cache and key in _render_cache:
        return _render_cache[key]
    args = ["template", release, str(chart), "--namespace", namespace]
    for v in values:
        args += ["-f", v]
    for s in sets:
        args += ["--set", s]
    p = helm(*args)
    if p.returncode != 0:
        raise Failed(f"helm {' '.join(args)} failed:\n{p.stderr.strip()}")
    docs = [d for d in yaml.safe_load_all(p.stdout) if d]
    if cache:
        _render_cache[key] = docs
    return docs


def render_fail(chart: Path, sets: tuple[str, ...]) -> str:
    args = ["template", "test", str(chart), "--namespace", RELEASE_NS]
    for s in sets:
        args += ["--set", s]
    p = helm(*args)
    ensure(p.returncode != 0, f"helm template {' '.join(sets)} succeeded; it should have failed")
    return p.stderr


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    ensure(len(found) == 1, f"expected one {kind}{' ' + name if name else ''}, found {len(found)}")
    return found[0]


def ci_values(chart: Path) -> list[str]:
    return sorted(glob.glob(str(chart / "ci" / "*.yaml")))


def load_crds() -> list[dict]:
    return [yaml.safe_load(open(f)) for f in sorted(glob.glob(str(ROOT / "crds" / "*.yaml")))]


CRDS = CrdValidator(load_crds())

# Kinds that are neither built in nor ours: a small schema of the fields the chart sets.
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {"type": "object", "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
                "namespaceSelector": {"type": "object", "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}}},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                                   "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                                   "scrapeTimeout": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                                   "honorLabels": {"type": "boolean"}}}},
            },
        },
    },
}

# The part of the Prometheus Operator's PrometheusRule schema (monitoring.coreos.com/v1) the
# operator chart uses.
PROMETHEUS_RULE_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "spec": {
            "type": "object", "required": ["groups"], "additionalProperties": False,
            "properties": {"groups": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["name", "rules"], "additionalProperties": False,
                "properties": {"name": {"type": "string", "minLength": 1}, "rules": {"type": "array", "items": {
                    "type": "object", "required": ["expr"], "additionalProperties": False,
                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                    "properties": {"alert": {"type": "string"}, "record": {"type": "string"},
                                   "expr": {"type": "string", "minLength": 1},
                                   "for": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                                   "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                   "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}},
        },
    },
}


def validate_object(doc: dict, version: str) -> list[str]:
    """Errors of one rendered object against its schema (empty: valid)."""
    ident = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
    if CRDS.knows(doc):
        res = CRDS.validate(doc)
        errs = [f"{ident}: {e}" for e in res.errors]
        errs += [f"{ident}: CEL rule not evaluated (add it to crdschema.CEL_RULES): {r}" for r in res.not_evaluated]
        if doc["kind"] == "SlurmNodeSet":
            tmpl = doc["spec"]["template"]
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nodeset-pod", **(tmpl.get("metadata") or {})},
                   "spec": tmpl["spec"]}
            errs += [f"{ident}.spec.template (as a Pod): {e}" for e in validate_object(pod, version)]
        return errs
    if doc.get("apiVersion") == "monitoring.coreos.com/v1" and doc.get("kind") == "ServiceMonitor":
        import jsonschema
        return [f"{ident}: {e.message}" for e in jsonschema.Draft202012Validator(SERVICE_MONITOR_SCHEMA).iter_errors(doc)]
    if doc.get("apiVersion") == "monitoring.coreos.com/v1" and doc.get("kind") == "PrometheusRule":
        import jsonschema
        return [f"{ident}: {e.message}" for e in jsonschema.Draft202012Validator(PROMETHEUS_RULE_SCHEMA).iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [f"{ident} (Kubernetes {version}): .{path}: {e.message}"]
    except SchemaNotFoundError as e:
        return [f"{ident}: no schema: {e.message}"]
    return []


def pod_templates(docs: list[dict]) -> list[tuple[str, dict, dict | None]]:
    """(owner, pod template, selector matchLabels) for every workload, SlurmNodeSets included."""
    out = []
    for d in docs:
        ident = f"{d['kind']}/{d['metadata']['name']}"
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            out.append((ident, d["spec"]["template"], d["spec"]["selector"].get("matchLabels")))
        elif d["kind"] == "SlurmNodeSet":
            out.append((ident, d["spec"]["template"], None))
    return out


def containers(tmpl: dict) -> list[dict]:
    spec = tmpl["spec"]
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


# --- the test runner ----------------------------------------------------------------------------

class Runner:
    def __init__(self, only: str | None):
        self.passed = 0
        self.failed = 0
        self.only = only

    def check(self, name: str, fn: Callable[[], Any]) -> None:
        if self.only and not re.search(self.only, name):
            return
        try:
            note = fn()
        except Failed as e:
            self.failed += 1
            print(f"FAIL {name}: {e}")
            return
        except Exception:  # a bug in the test or an unexpected render: still a failure
            self.failed += 1
            print(f"FAIL {name}: unexpected error\n{textwrap.indent(traceback.format_exc(), '    ')}")
            return
        self.passed += 1
        print(f"PASS {name}" + (f" ({note})" if note else ""))


# --- lint and render ----------------------------------------------------------------------------

def t_lint(chart: Path, values: str | None) -> Callable[[], str]:
    def run() -> str:
        args = ["lint", "--strict", str(chart)] + (["-f", values] if values else [])
        p = helm(*args)
        ensure(p.returncode == 0, f"{p.stdout}{p.stderr}")
        ensure("[WARNING]" not in p.stdout and "[ERROR]" not in p.stdout, p.stdout)
        return ""
    return run


def t_render_valid(chart: Path, values: tuple[str, ...], sets: tuple[str, ...] = ()) -> Callable[[], str]:
    def run() -> str:
        docs = render(chart, values, sets)
        ensure(docs, "rendered nothing")
        errors: list[str] = []
        seen: set[tuple] = set()
        for d in docs:
            for version in K8S_VERSIONS:
                errors += validate_object(d, version)
            key = (d.get("apiVersion"), d.get("kind"), d.get("metadata", {}).get("namespace"), d.get("metadata", {}).get("name"))
            if key in seen:
                errors.append(f"duplicate object {key}")
            seen.add(key)
        ensure(not errors, "\n  " + "\n  ".join(errors))
        kinds = sorted({d["kind"] for d in docs})
        return f"{len(docs)} objects valid for Kubernetes {'/'.join(K8S_VERSIONS)}: {', '.join(kinds)}"
    return run


def t_references(chart: Path, values: tuple[str, ...], external: set[str]) -> Callable[[], str]:
    """Everything a pod mounts or reads exists in the render (or is named as external)."""
    def run() -> str:
        docs = render(chart, values)
        names = {(d["kind"], d["metadata"]["name"]) for d in docs}
        for d in docs:  # StatefulSet volumeClaimTemplates count as claims
            if d["kind"] == "StatefulSet":
                for vct in d["spec"].get("volumeClaimTemplates") or []:
                    names.add(("VCT", vct["metadata"]["name"]))
        errors = []
        for owner, tmpl, match in pod_templates(docs):
            labels = (tmpl.get("metadata") or {}).get("labels") or {}
            if match is not None and any(labels.get(k) != v for k, v in match.items()):
                errors.append(f"{owner}: selector {match} does not match template labels {labels}")
            vols = {v["name"]: v for v in tmpl["spec"].get("volumes") or []}
            for c in containers(tmpl):
                for m in c.get("volumeMounts") or []:
                    if m["name"] not in vols and ("VCT", m["name"]) not in names:
                        errors.append(f"{owner}/{c['name']}: mounts undefined volume {m['name']}")
                for e in c.get("env") or []:
                    ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                    if ref and ("Secret", ref["name"]) not in names and ref["name"] not in external:
                        errors.append(f"{owner}/{c['name']}: env {e['name']} reads missing Secret {ref['name']}")
            for v in vols.values():
                refs = []
                if "configMap" in v:
                    refs.append(("ConfigMap", v["configMap"]["name"]))
                if "secret" in v:
                    refs.append(("Secret", v["secret"]["secretName"]))
                if "persistentVolumeClaim" in v:
                    refs.append(("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]))
                for src in (v.get("projected") or {}).get("sources") or []:
                    if "secret" in src:
                        refs.append(("Secret", src["secret"]["name"]))
                    if "configMap" in src:
                        refs.append(("ConfigMap", src["configMap"]["name"]))
                for kind, name in refs:
                    if (kind, name) not in names and name not in external:
                        errors.append(f"{owner}: volume {v['name']} refers to missing {kind} {name}")
        for svc in find(docs, "Service"):
            sel = svc["spec"].get("selector") or {}
            if not any(all(((t.get("metadata") or {}).get("labels") or {}).get(k) == val for k, val in sel.items())
                       for _, t, _ in pod_templates(docs)):
                errors.append(f"Service/{svc['metadata']['name']}: selector {sel} matches no pod template")
            for port in svc["spec"]["ports"]:
                tp = port.get("targetPort")
                if isinstance(tp, str) and not any(
                        any(p.get("name") == tp for c in containers(t) for p in c.get("ports") or [])
                        for _, t, _ in pod_templates(docs)):
                    errors.append(f"Service/{svc['metadata']['name']}: targetPort {tp} is no container port")
        ensure(not errors, "\n  " + "\n  ".join(errors))
        return ""
    return run


# --- CRDs ---------------------------------------------------------------------------------------

def t_crd_copy_in_sync() -> str:
    src = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    dst = sorted(p.name for p in (OPERATOR / "files" / "crds").glob("*.yaml"))
    ensure(src == dst, f"crds/ has {src}, helm/slurm-operator/files/crds/ has {dst}: run hack/gen-crds.sh")
    for name in src:
        a = (ROOT / "crds" / name).read_bytes()
        b = (OPERATOR / "files" / "crds" / name).read_bytes()
        ensure(a == b, f"helm/slurm-operator/files/crds/{name} differs from crds/{name}: run hack/gen-crds.sh")
    return f"{len(src)} CRDs"


def t_crds_render_unchanged() -> str:
    docs = render(OPERATOR)
    rendered = {d["metadata"]["name"]: d for d in find(docs, "CustomResourceDefinition")}
    src = {c["metadata"]["name"]: c for c in load_crds()}
    ensure(set(rendered) == set(src), f"rendered CRDs {sorted(rendered)} != crds/ {sorted(src)}")
    for name, crd in rendered.items():
        meta = dict(crd["metadata"])
        ensure(meta.get("annotations", {}).get("helm.sh/resource-policy") == "keep", f"{name}: no resource-policy keep")
        meta.pop("labels", None)
        meta.pop("annotations", None)
        ensure({**crd, "metadata": meta} == src[name], f"{name}: the rendered CRD differs from crds/{name}.yaml")
    ensure(not find(render(OPERATOR, sets=("crds.install=false",), cache=False), "CustomResourceDefinition"),
           "crds.install=false still renders CRDs")
    return ""


# --- RBAC ---------------------------------------------------------------------------------------

def rbac_rules() -> list[dict]:
    return yaml.safe_load(RULES_FILE.read_text())["rules"]


USER_ROLES = ("app.kubernetes.io/component", "user-roles")  # the ClusterRoles for people


def is_user_role(d: dict) -> bool:
    return (d["metadata"].get("labels") or {}).get(USER_ROLES[0]) == USER_ROLES[1]


# (watched namespaces, leader election, credentials namespace ("" = the release namespace))
RBAC_MODES: list[tuple[tuple[str, ...], bool, str]] = [
    ((), False, ""), (("hpc",), False, ""), ((), True, "slurm-admin"),
    (("hpc", "team-a"), True, "slurm-admin"), (("default", "hpc"), False, "hpc"),
]


def rbac_mode_name(watch: tuple[str, ...], leader: bool, creds: str) -> str:
    return (f"watch {'namespaces ' + ','.join(watch) if watch else 'all namespaces'}, "
            f"leader election {'on' if leader else 'off'}, credentials in {creds or RELEASE_NS}")


def rbac_sets(watch: tuple[str, ...], leader: bool, creds: str) -> tuple[str, ...]:
    sets = []
    if watch:
        sets.append("watchNamespaces={" + ",".join(watch) + "}")
    if leader:
        sets += ["leaderElection.enabled=true", "replicas=2"]
    if creds:
        sets.append(f"credentialsNamespace={creds}")
    return tuple(sets)


def expected_grants(watch: tuple[str, ...], leader: bool, creds: str) -> set[tuple]:
    """(Role|ClusterRole, namespace, apiGroup, resource, verb) that rbac-rules.yaml promises."""
    flags = {"leaderElection.enabled": leader, "tagKey.create": True}
    out = set()
    for r in rbac_rules():
        if r.get("when") and not flags[r["when"]]:
            continue
        scope = r["scope"]
        if scope == "watched":
            targets = [("Role", ns) for ns in watch] if watch else [("ClusterRole", None)]
        elif scope == "cluster":
            targets = [("ClusterRole", None)]
        elif scope == "credentials":
            targets = [("Role", creds or RELEASE_NS)]
        elif scope == "default":
            targets = [("Role", "default")] if watch else [("ClusterRole", None)]
        elif scope == "operator":
            targets = [("Role", RELEASE_NS)]
        else:
            raise Failed(f"rbac-rules.yaml: unknown scope {scope}")
        for target in targets:
            for g in r["apiGroups"]:
                for res in r["resources"]:
                    for v in r["verbs"]:
                        out.add((*target, g, res, v))
    return out


def grants_of(d: dict) -> set[tuple]:
    ns = d["metadata"].get("namespace") if d["kind"] == "Role" else None
    return {(d["kind"], ns, g, res, v) for rule in d.get("rules") or []
            for g in rule.get("apiGroups", []) for res in rule.get("resources", []) for v in rule.get("verbs", [])}


def t_rbac_mode(watch: tuple[str, ...], leader: bool, creds: str) -> Callable[[], str]:
    def run() -> str:
        docs = render(OPERATOR, sets=rbac_sets(watch, leader, creds), cache=False)
        sa = one(docs, "ServiceAccount")["metadata"]
        got = set()
        problems = []
        for d in docs:
            if d["kind"] not in ("Role", "ClusterRole"):
                continue
            binding_kind = "RoleBinding" if d["kind"] == "Role" else "ClusterRoleBinding"
            bound = [b for b in find(docs, "RoleBinding") + find(docs, "ClusterRoleBinding")
                     if b["roleRef"]["kind"] == d["kind"] and b["roleRef"]["name"] == d["metadata"]["name"]
                     and (d["kind"] == "ClusterRole" or b["metadata"].get("namespace") == d["metadata"].get("namespace"))]
            if is_user_role(d):  # for people: the chart binds them to nobody
                if bound:
                    problems.append(f"{d['kind']}/{d['metadata']['name']} (for people) is bound by the chart")
                continue
            for rule in d.get("rules") or []:
                if rule.get("resourceNames") or rule.get("nonResourceURLs"):
                    problems.append(f"{d['kind']}/{d['metadata']['name']}: unexpected resourceNames/nonResourceURLs")
                if "*" in rule.get("apiGroups", []) + rule.get("resources", []) + rule.get("verbs", []):
                    problems.append(f"{d['kind']}/{d['metadata']['name']}: wildcard in {rule}")
            got |= grants_of(d)
            ours = [b for b in bound if b["kind"] == binding_kind
                    and {"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]} in b["subjects"]]
            if len(ours) != 1 or len(bound) != 1 or len(ours[0]["subjects"]) != 1:
                problems.append(f"{d['kind']}/{d['metadata']['name']}: bound {len(bound)} times, to the operator's ServiceAccount alone {len(ours)} times")
        want = expected_grants(watch, leader, creds)
        missing, extra = want - got, got - want
        if missing:
            problems.append("missing grants: " + ", ".join(map(str, sorted(missing, key=str))))
        if extra:
            problems.append("grants not in rbac-rules.yaml: " + ", ".join(map(str, sorted(extra, key=str))))
        ensure(not problems, "\n  " + "\n  ".join(problems))
        roles = sorted(f"{d['kind']}/{d['metadata'].get('namespace', '')}/{d['metadata']['name']}".replace("//", "/")
                       for d in docs if d["kind"] in ("Role", "ClusterRole") and not is_user_role(d))
        return f"{len(got)} grants in {', '.join(roles)}"
    return run


SENSITIVE = {"secrets", "configmaps", "*"}  # core resources only the credentials Role may read


def t_rbac_secrets_confined() -> str:
    """No ClusterRole (the operator's or a user role) grants Secrets or ConfigMaps; the only Role
    that does is the one in the credentials namespace, read-only but for creating Secrets (the
    tag key's); and src/ opens an Api for them only in
    one namespace (never Api::all)."""
    problems = []
    modes = RBAC_MODES + [((), False, "")]
    for watch, leader, creds in modes:
        docs = render(OPERATOR, sets=rbac_sets(watch, leader, creds), cache=False)
        where = rbac_mode_name(watch, leader, creds)
        for d in find(docs, "ClusterRole") + find(docs, "Role"):
            for rule in d.get("rules") or []:
                if not set(rule.get("apiGroups", [])) & {"", "*"}:
                    continue
                hit = set(rule.get("resources", [])) & SENSITIVE
                if not hit:
                    continue
                if d["kind"] == "ClusterRole":
                    problems.append(f"{where}: ClusterRole/{d['metadata']['name']} grants {sorted(hit)} cluster-wide")
                elif d["metadata"]["namespace"] != (creds or RELEASE_NS):
                    problems.append(f"{where}: Role {d['metadata']['namespace']}/{d['metadata']['name']} grants {sorted(hit)} outside the credentials namespace")
                # `create` on Secrets: the tag key Secret, made once at start (a create cannot
                # overwrite or read another Secret); nothing else may change them.
                elif "*" in hit or set(rule["verbs"]) - {"get", "list", "watch"} - ({"create"} if hit == {"secrets"} else set()):
                    problems.append(f"{where}: the credentials Role grants {rule}: read-only Secrets and ConfigMaps only (and create for the tag key Secret)")
        for b in find(docs, "RoleBinding"):
            if b["roleRef"]["kind"] == "ClusterRole":
                problems.append(f"{where}: RoleBinding {b['metadata']['name']} binds a ClusterRole")
    opened = 0
    for f in sorted((ROOT / "src").rglob("*.rs")):
        text = f.read_text(errors="replace")
        for m in re.finditer(r"\bApi\s*(?:::\s*)?<\s*(?:PartialObjectMeta\s*<\s*)?(Secret|ConfigMap)\s*>\s*>?", text):
            if text[:m.start()].rstrip().endswith("&"):
                continue  # a parameter's type: the call site opens it
            after = text[m.end():m.end() + 80]
            opened += 1
            if not re.match(r"\s*(=\s*Api\s*)?::\s*namespaced\s*\(", after):
                line = text[:m.start()].count("\n") + 1
                problems.append(f"{f.relative_to(ROOT)}:{line}: Api<{m.group(1)}> not opened with Api::namespaced: {text[m.start():m.end() + 40]!r}")
    ensure(opened > 0, "found no Api<Secret>/Api<ConfigMap> in src/: the check is looking in the wrong place")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return f"{len(modes)} modes; src/ opens Secrets/ConfigMaps {opened} times, each namespaced"


TENANT_EDIT_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]


def t_rbac_user_roles() -> str:
    """The ClusterRoles for people: exactly what they promise, aggregated as configured."""
    crds = load_crds()
    plurals = sorted(c["spec"]["names"]["plural"] for c in crds)
    subresources = sorted(f"{c['spec']['names']['plural']}/{sub}" for c in crds
                          for v in c["spec"]["versions"] for sub in (v.get("subresources") or {}))
    docs = render(OPERATOR)
    roles = {d["metadata"]["name"]: d for d in find(docs, "ClusterRole") if is_user_role(d)}
    ensure(sorted(roles) == ["test-slurm-operator-admin", "test-slurm-operator-tenant-edit", "test-slurm-operator-tenant-view"],
           f"user roles {sorted(roles)}")

    def rules(name: str) -> set[tuple]:
        return {(g, r, v) for rule in roles[name]["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}

    def labels(name: str) -> dict:
        return roles[name]["metadata"].get("labels") or {}
    agg = "rbac.authorization.k8s.io/aggregate-to-"
    edit = rules("test-slurm-operator-tenant-edit")
    ensure(edit == {("slurm.rs", "slurmjobs", v) for v in TENANT_EDIT_VERBS}, f"tenant-edit grants {sorted(edit)}")
    ensure(not any("/" in r for _, r, _ in edit), "tenant-edit grants a subresource (status is the operator's)")
    ensure(labels("test-slurm-operator-tenant-edit").get(agg + "edit") == "true"
           and labels("test-slurm-operator-tenant-edit").get(agg + "admin") == "true", "tenant-edit not aggregated into edit and admin")
    ensure(not any(k.startswith(agg) and k != agg + "edit" and k != agg + "admin" for k in labels("test-slurm-operator-tenant-edit")),
           "tenant-edit aggregated elsewhere")
    view = rules("test-slurm-operator-tenant-view")
    ensure(view == {("slurm.rs", "slurmjobs", v) for v in ("get", "list", "watch")}, f"tenant-view grants {sorted(view)}")
    ensure({k: v for k, v in labels("test-slurm-operator-tenant-view").items() if k.startswith(agg)} == {agg + "view": "true"},
           "tenant-view not aggregated into view (alone)")
    admin = rules("test-slurm-operator-admin")
    want = {("slurm.rs", p, v) for p in plurals for v in TENANT_EDIT_VERBS}
    want |= {("slurm.rs", s, v) for s in subresources for v in ("get", "update", "patch")}
    ensure(admin == want, f"admin: missing {sorted(want - admin)}, extra {sorted(admin - want)}")
    ensure(not any(k.startswith(agg) for k in labels("test-slurm-operator-admin")), "the admin role is aggregated")
    for d in roles.values():
        ensure(all("*" not in r["apiGroups"] + r["resources"] + r["verbs"] for r in d["rules"]), f"{d['metadata']['name']}: wildcard")
    # Switches.
    docs = render(OPERATOR, sets=("rbac.tenantRoles.aggregateToEdit=false", "rbac.tenantRoles.aggregateToView=false"), cache=False)
    for d in find(docs, "ClusterRole"):
        ensure(not any(k.startswith(agg) for k in d["metadata"].get("labels") or {}), f"{d['metadata']['name']} still aggregated")
    docs = render(OPERATOR, sets=("rbac.tenantRoles.create=false", "rbac.adminRole.create=false"), cache=False)
    ensure(not [d for d in find(docs, "ClusterRole") if is_user_role(d)], "user roles rendered although switched off")
    docs = render(OPERATOR, sets=("rbac.create=false",), cache=False)
    ensure(sorted(d["metadata"]["name"] for d in find(docs, "ClusterRole")) == sorted(roles)
           and not find(docs, "Role") and not find(docs, "ClusterRoleBinding"), "rbac.create=false: the operator's RBAC is still rendered")
    return f"tenant-edit, tenant-view (aggregated), admin over {', '.join(plurals)} and {', '.join(subresources)}"


def finalizer_policy_allows(expression: str, user: str, groups: list[str] | None,
                            old: list[str] | None, new: list[str] | None) -> bool:
    """The policy's CEL expression, evaluated (cel-python) on an UPDATE of a SlurmJob whose
    finalizers go from `old` to `new` (None: the field is absent) by `user` in `groups` (None:
    no groups field, as the API server omits an empty list)."""
    def meta(finalizers: list[str] | None) -> dict:
        return {"name": "job"} if finalizers is None else {"name": "job", "finalizers": finalizers}
    info: dict[str, Any] = {"username": user}
    if groups is not None:
        info["groups"] = groups
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    result = program.evaluate({
        "request": celpy.json_to_cel({"userInfo": info, "operation": "UPDATE"}),
        "oldObject": celpy.json_to_cel({"metadata": meta(old)}),
        "object": celpy.json_to_cel({"metadata": meta(new)}),
    })
    ensure(isinstance(result, celpy.celtypes.BoolType), f"the expression gave {result!r}, not a bool")
    return bool(result)


def t_finalizer_policy() -> str:
    """The ValidatingAdmissionPolicy that keeps tenants from removing a SlurmJob's finalizer:
    its CEL expression evaluated on the cases that matter, its binding, its switches."""
    finalizer = re.search(r'pub const FINALIZER: &str = "([^"]+)"', (ROOT / "src/crd/mod.rs").read_text())
    ensure(finalizer is not None, "FINALIZER not found in src/crd/mod.rs")
    cleanup = finalizer.group(1)
    docs = render(OPERATOR, namespace="ops", cache=False)
    policy = one(docs, "ValidatingAdmissionPolicy")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    ensure(binding["spec"]["policyName"] == policy["metadata"]["name"], "the binding names another policy")
    ensure(binding["spec"]["validationActions"] == ["Deny"], f"binding actions {binding['spec']['validationActions']}")
    ensure(policy["spec"]["failurePolicy"] == "Fail", "failurePolicy is not Fail")
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    ensure(rules == [{"apiGroups": ["slurm.rs"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["slurmjobs"]}],
           f"matches {rules}")
    [validation] = policy["spec"]["validations"]
    ensure(validation.get("reason") == "Forbidden", "a refusal is not 403 Forbidden")
    ensure(cleanup in validation["message"], "the message does not name the finalizer")
    expression = validation["expression"]
    ensure(f"'{cleanup}'" in expression, f"the expression does not test {cleanup}")
    operator = one(docs, "ServiceAccount")["metadata"]["name"]
    operator = f"system:serviceaccount:ops:{operator}"
    tenant, tenant_groups = "system:serviceaccount:team-a:researcher", ["system:serviceaccounts", "system:authenticated"]
    other = "example.com/other"
    cases = [
        # (who, groups, old finalizers, new finalizers, allowed, why)
        (tenant, tenant_groups, [cleanup], None, False, "a tenant removes the only finalizer"),
        (tenant, tenant_groups, [cleanup], [], False, "a tenant empties the finalizers"),
        (tenant, tenant_groups, [other, cleanup], [other], False, "a tenant removes ours and keeps another"),
        (tenant, None, [cleanup], None, False, "a user without groups removes it"),
        (tenant, tenant_groups, [cleanup], [cleanup], True, "a tenant edits the spec"),
        (tenant, tenant_groups, [cleanup], [cleanup, other], True, "a tenant adds a finalizer"),
        (tenant, tenant_groups, None, None, True, "a SlurmJob without finalizers (refused by its access) is edited"),
        (tenant, tenant_groups, [other], [], True, "a tenant removes another finalizer"),
        (operator, ["system:serviceaccounts", "system:authenticated"], [cleanup], None, True, "the operator's cleanup"),
        ("kubernetes-admin", ["system:masters", "system:authenticated"], [cleanup], None, True, "an admin releases a stuck SlurmJob"),
        ("kubernetes-admin", ["kubeadm:cluster-admins", "system:authenticated"], [cleanup], None, True, "kubeadm's admin does"),
        ("system:serviceaccount:other:slurm-operator", tenant_groups, [cleanup], None, False, "another namespace's ServiceAccount of that name"),
    ]
    for who, groups, old, new, allowed, why in cases:
        got = finalizer_policy_allows(expression, who, groups, old, new)
        ensure(got == allowed, f"{why}: {'allowed' if got else 'refused'} ({who}, {old} -> {new})")
    # Values: another ServiceAccount name, admin groups, extra users; off.
    docs = render(OPERATOR, sets=("serviceAccount.create=false", "serviceAccount.name=ops-sa", "finalizerPolicy.adminGroups={platform-admins}",
                                  "finalizerPolicy.extraUsers={argocd}"), namespace="ops", cache=False)
    expression = one(docs, "ValidatingAdmissionPolicy")["spec"]["validations"][0]["expression"]
    for who, groups, allowed in [("system:serviceaccount:ops:ops-sa", [], True), (operator, [], False), ("argocd", [], True),
                                 ("alice", ["platform-admins"], True), ("root", ["system:masters"], False)]:
        got = finalizer_policy_allows(expression, who, groups, [cleanup], None)
        ensure(got == allowed, f"{who} in {groups}: {'allowed' if got else 'refused'} with the values set")
    docs = render(OPERATOR, sets=("finalizerPolicy.enabled=false",), cache=False)
    ensure(not find(docs, "ValidatingAdmissionPolicy") and not find(docs, "ValidatingAdmissionPolicyBinding"),
           "finalizerPolicy.enabled=false still renders the policy")
    # Namespaces: every one without watchNamespaces; with it, those only (elsewhere no operator
    # removes the finalizer, and the SlurmJob's owner must be able to).
    ensure("namespaceSelector" not in policy["spec"]["matchConstraints"] and "matchResources" not in binding["spec"],
           "without watchNamespaces the policy must cover every namespace")
    docs = render(OPERATOR, sets=("watchNamespaces={hpc,default}",), cache=False)
    scopes = [one(docs, "ValidatingAdmissionPolicy")["spec"]["matchConstraints"].get("namespaceSelector"),
              (one(docs, "ValidatingAdmissionPolicyBinding")["spec"].get("matchResources") or {}).get("namespaceSelector")]
    for ns, covered in [("hpc", True), ("default", True), ("team-b", False), ("kube-system", False)]:
        got = all(np_selects(sel, {"kubernetes.io/metadata.name": ns}) for sel in scopes if sel is not None)
        ensure(got == covered, f"watchNamespaces={{hpc,default}}: namespace {ns} {'covered' if got else 'not covered'}")
    for v in K8S_VERSIONS:
        for d in find(docs, "ValidatingAdmissionPolicy") + find(docs, "ValidatingAdmissionPolicyBinding"):
            errs = validate_object(d, v)
            ensure(not errs, f"watchNamespaces={{hpc,default}}: {errs}")
    return (f"{len(cases)} cases refused or allowed as they should; ServiceAccount, adminGroups, extraUsers, the switch and "
            "watchNamespaces honoured")


# Rust type -> (apiGroup, resource) for the Api<...> the controllers open.
KIND_RESOURCES = {
    "SlurmCluster": ("slurm.rs", "slurmclusters"), "SlurmJob": ("slurm.rs", "slurmjobs"),
    # The SlurmJob cache's form of a SlurmJob (src/crd/slurmjob/cached.rs), and the controller's
    # whole reads of one (src/crd/slurmjob/wire.rs): the same resource.
    "CachedSlurmJob": ("slurm.rs", "slurmjobs"), "WholeSlurmJob": ("slurm.rs", "slurmjobs"),
    # The Pod watches' forms of a Pod: its metadata, and that with its phase (src/crd/pod_meta.rs).
    "PodMeta": ("", "pods"), "PodMetaPhase": ("", "pods"),
    "SlurmNodeSet": ("slurm.rs", "slurmnodesets"), "Namespace": ("", "namespaces"), "Node": ("", "nodes"),
    "Pod": ("", "pods"), "Secret": ("", "secrets"), "ConfigMap": ("", "configmaps"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"), "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
    "Event": ("events.k8s.io", "events"), "Lease": ("coordination.k8s.io", "leases"),
    "CustomResourceDefinition": ("apiextensions.k8s.io", "customresourcedefinitions"),
}
# Api<Kind>, Api::<Kind>, and metadata-only Api<PartialObjectMeta<Kind>> (same permissions).
API_TYPE = re.compile(r"\bApi\s*(?:::\s*)?<\s*(?:PartialObjectMeta\s*<\s*)?([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)\s*>")


def t_rbac_matches_code() -> str:
    used: dict[tuple, set[str]] = {}
    unknown = []
    for f in sorted((ROOT / "src").rglob("*.rs")):
        text = f.read_text(errors="replace")
        hits = [m.group(1).split("::")[-1] for m in API_TYPE.finditer(text)]
        if re.search(r"\bRecorder\b", text):
            hits.append("Event")
        if re.search(r"\bLeaseManagerBuilder\b", text):
            hits.append("Lease")
        for kind in hits:
            if kind in ("K", "T", "DynamicObject", "PartialObjectMeta"):
                continue  # generic code: the concrete kinds show up at the call sites
            if kind not in KIND_RESOURCES:
                unknown.append(f"{f.relative_to(ROOT)}: Api<{kind}>")
                continue
            used.setdefault(KIND_RESOURCES[kind], set()).add(str(f.relative_to(ROOT)))
    granted = {(g, r) for rule in rbac_rules() for g in rule["apiGroups"] for r in rule["resources"]}
    problems = [f"{u} (add the kind to KIND_RESOURCES and a rule to rbac-rules.yaml)" for u in unknown]
    for res, files in sorted(used.items()):
        if res not in granted:
            problems.append(f"the code uses {res[1]} ({res[0] or 'core'}) in {', '.join(sorted(files))} but rbac-rules.yaml grants nothing on it")
    unused = sorted(r for (g, r) in granted if "/" not in r and (g, r) not in used)
    if unused:
        problems.append("rules for resources the code never opens an Api for: " + ", ".join(unused))
    problems += rbac_verb_problems(used)
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return f"{len(used)} kinds used by src/, no grant unused"


# Verbs the code can only need when some source file holds both the kind's Api and the call.
VERB_CALLS = {"delete": r"\.delete\(", "create": r"\.create\(|Patch::Apply", "get": r"\.get(_opt)?\(|watcher\(|await_condition"}


def rbac_verb_problems(used: dict) -> list[str]:
    """Least privilege at verb level: `update` (a replace) is granted only on the */finalizers
    subresource, since src/ never replaces an object; `delete`/`create`/`get` only on resources
    whose Api shares a file with such a call."""
    texts = {str(f.relative_to(ROOT)): f.read_text(errors="replace") for f in (ROOT / "src").rglob("*.rs")}
    replaces = any(re.search(r"\.replace(_status)?\(\s*&", t) for t in texts.values())
    problems = []
    for rule in rbac_rules():
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                if "update" in rule["verbs"] and not r.endswith("/finalizers") and not replaces:
                    problems.append(f"update on {r}: src/ never replaces an object (patch is enough)")
                if "/" in r:
                    continue
                files = used.get((g, r), set())
                for verb, call in VERB_CALLS.items():
                    if verb in rule["verbs"] and r not in ("leases", "events") and not any(re.search(call, texts[f]) for f in files):
                        problems.append(f"{verb} on {r}: no file that opens its Api makes such a call")
    return problems


# --- operator chart -----------------------------------------------------------------------------

def operator_container(docs: list[dict]) -> tuple[dict, dict]:
    dep = one(docs, "Deployment")
    return dep, next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "operator")


def t_operator_security() -> str:
    dep, c = operator_container(render(OPERATOR))
    pod = dep["spec"]["template"]["spec"]
    sc = c["securityContext"]
    ensure(pod["securityContext"].get("runAsNonRoot") is True and pod["securityContext"].get("runAsUser", 0) != 0, "pod not non-root")
    ensure(sc.get("readOnlyRootFilesystem") is True, "root filesystem not read-only")
    ensure(sc.get("allowPrivilegeEscalation") is False, "privilege escalation allowed")
    ensure(sc.get("capabilities", {}).get("drop") == ["ALL"], "capabilities not dropped")
    ensure(pod["securityContext"].get("seccompProfile", {}).get("type") == "RuntimeDefault", "no RuntimeDefault seccomp")
    ensure(c["resources"].get("requests") and c["resources"].get("limits", {}).get("memory"), "no requests/memory limit")
    ensure(c["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness is not /healthz")
    ensure(c["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness is not /readyz")
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["http-metrics"]
    ensure(c["livenessProbe"]["httpGet"]["port"] in ("http-metrics", port), "probe not on the metrics port")
    ensure(c["image"] == "ghcr.io/slurm-rs/slurm-operator:0.1.0", f"image {c['image']} is not <repository>:<appVersion>")
    svc = one(render(OPERATOR), "Service")
    ensure(svc["spec"]["ports"][0]["port"] == port, "metrics Service port != metrics port")
    return ""


def t_operator_network_policy() -> str:
    """networkPolicy: off by default; on, it selects exactly the operator's pods and admits
    ingress only to the metrics port, only from metricsFrom (nobody when empty) and from the
    chart's `helm test` Pod (which reads /readyz through the metrics Service), selected by labels
    that Pod carries and the operator's pods do not."""
    def selects(selector: dict, labels: dict) -> bool:
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

    ensure(not find(render(OPERATOR), "NetworkPolicy"), "a NetworkPolicy by default")
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    docs = render(OPERATOR, sets=("networkPolicy.enabled=true",
                                  "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring"),
                  cache=False)
    policy = one(docs, "NetworkPolicy")
    dep, c = operator_container(docs)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    ensure(selects(selector, pod_labels), f"podSelector {selector} does not select the operator's pods {pod_labels}")
    ensure(policy["spec"]["policyTypes"] == ["Ingress"], str(policy["spec"]["policyTypes"]))
    ports = {p["name"] for p in c["ports"]}
    rules = policy["spec"]["ingress"]
    ensure(all([p["port"] for p in r["ports"]] == ["http-metrics"] for r in rules) and "http-metrics" in ports,
           f"ingress ports {[r['ports'] for r in rules]}, container ports {ports}")
    ensure(len(rules) == 2 and rules[0]["from"] == [peer], str(rules))
    # The helm test Pod: admitted by its own labels (only a podSelector: same namespace), and
    # the rule admits neither every pod of the namespace nor the operator's own.
    test_pod = one(docs, "Pod")
    ensure(rules[1]["from"] == [{"podSelector": rules[1]["from"][0].get("podSelector")}], f"helm test rule {rules[1]}")
    test_selector = rules[1]["from"][0]["podSelector"].get("matchLabels") or {}
    ensure(selects(test_selector, test_pod["metadata"]["labels"]),
           f"the helm test rule {test_selector} does not admit the helm test Pod {test_pod['metadata']['labels']}")
    ensure(not selects(test_selector, pod_labels) and set(test_selector) - {"app.kubernetes.io/name", "app.kubernetes.io/instance"},
           f"the helm test rule {test_selector} admits more than the helm test Pod")
    svc = one(docs, "Service")
    ensure(svc["spec"]["ports"][0]["targetPort"] == "http-metrics", f"the Service the test reads targets {svc['spec']['ports'][0]}")
    errors = validate_object(policy, K8S_VERSIONS[-1])
    ensure(not errors, "; ".join(errors))
    # Empty metricsFrom: only the helm test Pod; without the Service (so no helm test Pod): nobody.
    closed = one(render(OPERATOR, sets=("networkPolicy.enabled=true",), cache=False), "NetworkPolicy")
    ensure(closed["spec"]["ingress"] == rules[1:], f"empty metricsFrom admits {closed['spec']['ingress']}")
    docs = render(OPERATOR, sets=("networkPolicy.enabled=true", "service.enabled=false"), cache=False)
    ensure(one(docs, "NetworkPolicy")["spec"]["ingress"] == [] and not find(docs, "Pod"),
           f"service.enabled=false: {one(docs, 'NetworkPolicy')['spec']['ingress']}")
    return "ingress: metrics port from metricsFrom and the helm test Pod only"


def t_services_not_external() -> str:
    """slurmrestd's Service (JWT bearer tokens over plain HTTP) and the operator's metrics Service
    (unauthenticated /metrics): ClusterIP by default; NodePort/LoadBalancer refused with a
    message naming the opt-in value, rendered with it."""
    out = []
    for chart, prefix, kind_of in ((CLUSTER, "slurmrestd.service", lambda docs: one(docs, "Service", "test-slurmrestd")),
                                   (OPERATOR, "service", lambda docs: one(docs, "Service"))):
        ensure(kind_of(render(chart))["spec"]["type"] == "ClusterIP", f"{rel_name(chart)}: default {prefix}.type is not ClusterIP")
        for t in ("NodePort", "LoadBalancer"):
            err = render_fail(chart, (f"{prefix}.type={t}",))
            ensure(f"{prefix}.allowExternal=true" in err and f"{prefix}.type is {t}" in err,
                   f"{rel_name(chart)} {prefix}.type={t}: the refusal does not name {prefix}.allowExternal:\n{err.strip()}")
            svc = kind_of(render(chart, sets=(f"{prefix}.type={t}", f"{prefix}.allowExternal=true"), cache=False))
            ensure(svc["spec"]["type"] == t, f"{rel_name(chart)} with {prefix}.allowExternal=true: type {svc['spec']['type']}")
        out.append(f"{prefix}.allowExternal")
    return ", ".join(out)


def rel_name(chart: Path) -> str:
    return os.path.relpath(chart, ROOT)


def t_operator_args() -> str:
    _, c = operator_container(render(OPERATOR))
    args = c["args"]
    ensure(args[:3] == ["run", "--metrics-addr", "[::]:8080"], f"args {args}")
    ensure(not {"--namespace", "--leader-election", "--allowed-endpoint"} & set(args), f"default args {args}")
    # The credentials namespace is always explicit, so the Role and the flag cannot disagree.
    ensure(args[args.index("--credentials-namespace") + 1] == RELEASE_NS, f"--credentials-namespace is not the release namespace: {args}")
    env = {e["name"]: e.get("value") for e in c["env"]}
    ensure(env["RUST_LOG"] == "warn,slurm_operator=info", f"RUST_LOG {env['RUST_LOG']}")
    # The operator's image: fully qualified (a registry host first: it has a dot or a port), the
    # tag the chart's appVersion, which is the crate's version.
    chart = yaml.safe_load((OPERATOR / "Chart.yaml").read_text())
    crate = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
    ensure(chart["appVersion"] == crate, f"appVersion {chart['appVersion']} != Cargo.toml version {crate}")
    ensure(c["image"] == f"ghcr.io/slurm-rs/slurm-operator:{crate}", f"default image {c['image']}")
    registry = c["image"].split("/")[0]
    ensure(c["image"].count("/") >= 2 and ("." in registry or ":" in registry), f"image {c['image']} is not fully qualified")
    listed = [i["image"] for i in yaml.safe_load(chart["annotations"]["artifacthub.io/images"])]
    ensure(listed == [c["image"]], f"artifacthub.io/images {listed} != the default image {c['image']}")
    # The output Pods' image is fully qualified by default and a value.
    ensure(args[args.index("--output-image") + 1] == "docker.io/library/busybox:1.37", f"--output-image: {args}")
    accepted_by_the_binary(args, env)
    _, c = operator_container(render(OPERATOR, sets=("outputPod.image=registry.example.org/tools/busybox:1.37",), cache=False))
    ensure(c["args"][c["args"].index("--output-image") + 1] == "registry.example.org/tools/busybox:1.37", f"--output-image: {c['args']}")
    dep, c = operator_container(render(OPERATOR, sets=("watchNamespaces={team-a,hpc}", "leaderElection.enabled=true", "replicas=2",
                                                       "log.format=text", "log.filter=debug", "metricsPort=9090",
                                                       "image.tag=v9", "leaderElection.leaseName=lead",
                                                       "credentialsNamespace=slurm-admin",
                                                       "allowedEndpoints={https://slurmrestd.example.org:6820,http://slurm-slurmrestd.slurm.svc.cluster.local:6820}"),
                                       cache=False))
    args = c["args"]
    ensure(args[args.index("--allowed-endpoint") + 1]
           == "https://slurmrestd.example.org:6820,http://slurm-slurmrestd.slurm.svc.cluster.local:6820", f"--allowed-endpoint: {args}")
    ensure(args[args.index("--namespace") + 1] == "hpc,team-a", f"--namespace is not the sorted list: {args}")
    ensure(args.count("--namespace") == 1, f"--namespace given twice: {args}")
    ensure(args[args.index("--credentials-namespace") + 1] == "slurm-admin", f"--credentials-namespace: {args}")
    ensure("--leader-election" in args and args[args.index("--log-format") + 1] == "text", f"args {args}")
    ensure("[::]:9090" in args and c["ports"][0]["containerPort"] == 9090, "metricsPort not applied")
    env = {e["name"]: e.get("value") for e in c["env"]}
    ensure(env["RUST_LOG"] == "debug" and env["LEADER_ELECTION_LEASE"] == "lead", f"env {env}")
    ensure(c["image"] == "ghcr.io/slurm-rs/slurm-operator:v9", c["image"])
    accepted_by_the_binary(args, env)
    ensure(dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate", "leader election: strategy")
    dep, _ = operator_container(render(OPERATOR))
    ensure(dep["spec"]["strategy"]["type"] == "Recreate", "without leader election two operators could overlap in a rollout")
    _, c = operator_container(render(OPERATOR, sets=("image.digest=sha256:" + "a" * 64,), cache=False))
    ensure(c["image"] == "ghcr.io/slurm-rs/slurm-operator@sha256:" + "a" * 64, c["image"])
    return ""


def t_tag_key() -> str:
    """The tag key Secret: created by the operator (with `create` on Secrets in the credentials
    namespace only), or an existing one (no `create` anywhere, and the flag says so)."""
    def secret_verbs(docs: list[dict]) -> set[tuple]:
        return {(d["kind"], d["metadata"].get("namespace"), v) for d in docs if d["kind"] in ("Role", "ClusterRole")
                and not is_user_role(d) for rule in d.get("rules") or [] if "secrets" in rule.get("resources", [])
                for v in rule.get("verbs", [])}
    docs = render(OPERATOR, cache=False)
    _, c = operator_container(docs)
    args = c["args"]
    ensure(args[args.index("--tag-key-secret") + 1].endswith("-tag-key") and "--create-tag-key" not in args, f"args {args}")
    ensure(("Role", RELEASE_NS, "create") in secret_verbs(docs), f"no create on Secrets in the credentials namespace: {secret_verbs(docs)}")
    ensure({ns for (_, ns, _) in secret_verbs(docs)} == {RELEASE_NS}, f"Secrets granted outside the credentials namespace: {secret_verbs(docs)}")
    docs = render(OPERATOR, sets=("tagKey.create=false", "tagKey.secretName=admin-tag-key", "credentialsNamespace=slurm-admin"), cache=False)
    _, c = operator_container(docs)
    args = c["args"]
    ensure(args[args.index("--tag-key-secret") + 1] == "admin-tag-key" and args[args.index("--create-tag-key") + 1] == "false", f"args {args}")
    ensure(secret_verbs(docs) == {("Role", "slurm-admin", v) for v in ("get", "list", "watch")}, f"secret grants {secret_verbs(docs)}")
    accepted_by_the_binary(args, {e["name"]: e.get("value") for e in c["env"]})
    return ""


def accepted_by_the_binary(args: list[str], env: dict) -> None:
    """The rendered command line parses with the real `slurm-operator` (hack/gen-crds.sh built it
    before this runs): `--help` after the args makes clap check them all, then exit 0."""
    binary = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target") / "debug" / "slurm-operator"
    if not binary.exists():
        subprocess.run(["cargo", "build", "--quiet", "--bin", "slurm-operator"], cwd=ROOT, check=True)
    environ = {**os.environ, **{k: v for k, v in env.items() if v is not None}}
    run = subprocess.run([str(binary), *args, "--help"], capture_output=True, text=True, env=environ)
    ensure(run.returncode == 0, f"slurm-operator refuses the chart's args {args}: {run.stderr.strip()}")
    for flag in (a for a in args if a.startswith("--")):
        ensure(flag in run.stdout, f"{flag} is not an option of `slurm-operator run`")


def t_operator_extras() -> str:
    """PodDisruptionBudget with replicas > 1, the `helm test` Pod, extraObjects."""
    docs = render(OPERATOR)
    ensure(not find(docs, "PodDisruptionBudget"), "a PDB with one replica would only block node drains")
    docs = render(OPERATOR, sets=("replicas=2", "leaderElection.enabled=true"), cache=False)
    pdb = one(docs, "PodDisruptionBudget")
    dep = one(docs, "Deployment")
    ensure(pdb["spec"]["maxUnavailable"] == 1, f"maxUnavailable {pdb['spec']}")
    # Who writes is recorded for the next upgrade (a change of it recreates the pods; the live
    # Deployment is read with lookup, which `helm template` leaves empty: a rolling update).
    lease = next(e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "LEADER_ELECTION_LEASE")
    ensure(dep["metadata"]["annotations"]["slurm.rs/writers"] == f"lease:{lease}", f"writers {dep['metadata'].get('annotations')}")
    ensure(dep["spec"]["strategy"]["type"] == "RollingUpdate", f"strategy {dep['spec']['strategy']}")
    alone = one(render(OPERATOR), "Deployment")
    ensure(alone["metadata"]["annotations"]["slurm.rs/writers"] == "alone" and alone["spec"]["strategy"]["type"] == "Recreate",
           f"without leader election: {alone['metadata'].get('annotations')}, {alone['spec']['strategy']}")
    ensure(pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"], "PDB selects other pods than the Deployment")
    ensure(not find(render(OPERATOR, sets=("replicas=2", "leaderElection.enabled=true", "podDisruptionBudget.enabled=false"), cache=False),
                    "PodDisruptionBudget"), "podDisruptionBudget.enabled=false still renders one")
    # helm test: a Pod hook that reads /readyz through the metrics Service.
    tests = [d for d in render(OPERATOR) if d["kind"] == "Pod"]
    ensure(len(tests) == 1 and tests[0]["metadata"]["annotations"]["helm.sh/hook"] == "test", f"test pods {tests}")
    svc = one(render(OPERATOR), "Service")
    c = tests[0]["spec"]["containers"][0]
    url = f"http://{svc['metadata']['name']}.{RELEASE_NS}.svc:{svc['spec']['ports'][0]['port']}/readyz"
    ensure(c["command"][-1] == url, f"helm test reads {c['command'][-1]}, not {url}")
    ensure(c["image"] == "docker.io/library/busybox:1.37", f"helm test image {c['image']} is not outputPod.image")
    # A fullname of the longest the schema allows still names a valid Service (a DNS label, at
    # most 63 characters), and the test reads that one.
    long_docs = render(OPERATOR, sets=(f"fullnameOverride={'a' * 63}",), cache=False)
    svc = one(long_docs, "Service")
    name = svc["metadata"]["name"]
    ensure(len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name), f"metrics Service name {name!r}")
    test = next(d for d in long_docs if d["kind"] == "Pod")
    ensure(f"//{name}.{RELEASE_NS}.svc:" in test["spec"]["containers"][0]["command"][-1],
           f"helm test reads {test['spec']['containers'][0]['command'][-1]}, not Service {name}")
    # extraObjects: objects and strings, rendered with tpl.
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump({"extraObjects": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra-a", "namespace": "{{ .Release.Namespace }}"},
             "data": {"k": "v"}},
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra-b\n  namespace: {{ .Release.Namespace }}\n",
        ]}, f)
    try:
        docs = render(OPERATOR, values=(f.name,), cache=False)
    finally:
        os.unlink(f.name)
    for name in ("extra-a", "extra-b"):
        cm = one(docs, "ConfigMap", name)
        ensure(cm["metadata"]["namespace"] == RELEASE_NS, f"{name} not rendered with tpl: {cm['metadata']}")
    return ""


def t_operator_monitoring() -> str:
    """prometheusRule / grafanaDashboard: off by default; on, the chart ships the rules file and
    the dashboard as they are (their queries are checked against the operator's metrics by
    tests/dashboards.rs), and the ServiceMonitor keeps the operator's own namespace label."""
    docs = render(OPERATOR)
    ensure(not find(docs, "PrometheusRule") and not [d for d in find(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")],
           "monitoring objects by default")
    docs = render(OPERATOR, sets=("prometheusRule.enabled=true", "prometheusRule.labels.release=prom",
                                  "grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring",
                                  "grafanaDashboard.annotations.grafana_folder=Slurm", "serviceMonitor.enabled=true"), cache=False)
    rule = one(docs, "PrometheusRule")
    ensure(rule["metadata"]["labels"].get("release") == "prom", "prometheusRule.labels")
    want = yaml.safe_load((OPERATOR / "files" / "prometheus-rules.yaml").read_text())
    ensure(rule["spec"] == want, "the PrometheusRule's spec is not files/prometheus-rules.yaml")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    ensure({"SlurmClusterDown", "SlurmSubmitsFailing", "SlurmNodeSetDrainStuck", "SlurmPollErrors"} <= alerts, str(alerts))
    ensure(all("{{ $labels." in r["annotations"]["summary"] for g in rule["spec"]["groups"] for r in g["rules"]
               if r["alert"] != "SlurmOperatorNoLeader"), "Prometheus templates rendered away by helm")
    cm = one(docs, "ConfigMap", "test-slurm-operator-dashboard")
    ensure(cm["metadata"]["namespace"] == "monitoring", cm["metadata"]["namespace"])
    ensure(cm["metadata"]["labels"].get("grafana_dashboard") == "1", "sidecar label")
    ensure(cm["metadata"].get("annotations") == {"grafana_folder": "Slurm"}, str(cm["metadata"].get("annotations")))
    dashboard = json.loads(cm["data"]["slurm-operator.json"])
    ensure(dashboard == json.loads((OPERATOR / "files" / "dashboards" / "slurm-operator.json").read_text()),
           "the ConfigMap's dashboard is not files/dashboards/slurm-operator.json")
    sm = one(docs, "ServiceMonitor")
    ensure(all(e.get("honorLabels") is True for e in sm["spec"]["endpoints"]), "ServiceMonitor without honorLabels")
    return f"{len(alerts)} alerts, dashboard with {len(dashboard['panels'])} panels"


def t_operator_docs_match() -> str:
    """The alerts that values.yaml, the README and docs/metrics.md list are the rules file's, and
    the README's verbs on namespaces are the RBAC rule's. Where values.yaml and SECURITY.md
    confine Secrets to the credentials namespace, they also say that the Pods the operator may
    create in the watched namespaces can mount theirs; SECURITY.md names the streamer's way of
    following its file (output::streamer_script)."""
    rules = yaml.safe_load((OPERATOR / "files" / "prometheus-rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    values = (OPERATOR / "values.yaml").read_text()
    comment = re.search(r"^# -- Alerts(.*?)^prometheusRule:", values, re.S | re.M).group(1)
    readme = (OPERATOR / "README.md").read_text()
    row = next(ln for ln in readme.splitlines() if ln.startswith("| `prometheusRule.enabled`"))
    table = re.search(r"^## Alerts\n(.*?)^## ", (ROOT / "docs" / "metrics.md").read_text(), re.S | re.M).group(1)
    errs = []
    for where, text in (("values.yaml", comment), ("README.md", row), ("docs/metrics.md", table)):
        named = set(re.findall(r"\bSlurm[A-Za-z]+", text)) - {"SlurmCluster", "SlurmClusters", "SlurmJob", "SlurmJobs",
                                                               "SlurmNodeSet", "SlurmNodeSets"}
        if named != alerts:
            errs.append(f"{where} lists {sorted(named)}, files/prometheus-rules.yaml has {sorted(alerts)}")
    rbac = yaml.safe_load(RULES_FILE.read_text())["rules"]
    verbs = next(r["verbs"] for r in rbac if r.get("resources") == ["namespaces"])
    always = next(ln for ln in readme.splitlines() if ln.startswith("| always |"))
    said = re.search(r"namespaces ([a-z/]+) ", always)
    if not said or said.group(1).split("/") != verbs:
        errs.append(f"README says namespaces {said.group(1) if said else None}, files/rbac-rules.yaml grants {'/'.join(verbs)}")
    pods = next(r for r in rbac if r.get("resources") == ["pods"])
    ensure(pods["scope"] == "watched" and "create" in pods["verbs"], f"files/rbac-rules.yaml: pods {pods}")
    creds = re.search(r"^# -- The namespace the operator reads(.*?)^credentialsNamespace:", values, re.S | re.M).group(1)
    security = (ROOT / "SECURITY.md").read_text()
    limit = next((ln for ln in security.splitlines() if ln.startswith("- **Creating Pods.**")), "")
    for where, text in (("values.yaml (credentialsNamespace)", creds), ("SECURITY.md (Creating Pods)", limit)):
        flat = " ".join(text.replace("#", " ").split())
        if "at all" in flat or not all(w in flat for w in ("create", "Pods in the watched namespaces", "mount", "watchNamespaces")):
            errs.append(f"{where} must say that the operator creates Pods in the watched namespaces, which may mount "
                        f"their Secrets (restrict with watchNamespaces): {flat[:300]!r}")
    script = re.search(r"fn streamer_script\(\).*?\n}\n", (ROOT / "src/controller/slurmjob/output.rs").read_text(), re.S).group(0)
    streamer = next(ln for ln in security.splitlines() if ln.startswith("| **Reading someone else's file through the output Pod**"))
    for tool in ("tail", "cat"):
        used, named = re.search(rf"\b{tool}\b", script) is not None, f"`{tool}" in streamer
        if used != named:
            errs.append(f"SECURITY.md (output Pod) {'names' if named else 'does not name'} `{tool}`, "
                        f"output::streamer_script {'uses' if used else 'does not use'} it")
    ensure(not errs, "\n  " + "\n  ".join(errs))
    return f"{len(alerts)} alerts; namespaces {'/'.join(verbs)}; pods {'/'.join(pods['verbs'])} in the watched namespaces"


def t_artifacthub() -> str:
    """Chart.yaml's Artifact Hub annotations: the CRD list is crds/, the examples are
    examples/tenancy/ and valid."""
    chart = yaml.safe_load((OPERATOR / "Chart.yaml").read_text())
    notes = chart["annotations"]
    ensure(notes.get("artifacthub.io/operator") == "true", "not marked as an operator")
    listed = {(c["name"], c["kind"], c["version"]) for c in yaml.safe_load(notes["artifacthub.io/crds"])}
    shipped = {(c["metadata"]["name"], c["spec"]["names"]["kind"], v["name"]) for c in load_crds() for v in c["spec"]["versions"]}
    ensure(listed == shipped, f"artifacthub.io/crds {sorted(listed)} != crds/ {sorted(shipped)}")
    examples = yaml.safe_load(notes["artifacthub.io/crdsExamples"])
    files = [yaml.safe_load((ROOT / "examples" / "tenancy" / n).read_text()) for n in ("10-slurmcluster.yaml", "40-tenant-slurmjob.yaml")]
    ensure(examples == files, "artifacthub.io/crdsExamples differ from examples/tenancy/10-slurmcluster.yaml, 40-tenant-slurmjob.yaml")
    for doc in examples:
        errs = validate_object(doc, K8S_VERSIONS[-1])
        ensure(not errs, "; ".join(errs))
    return f"{len(listed)} CRDs, {len(examples)} examples"


def t_dockerfile() -> str:
    text = (ROOT / "Dockerfile").read_text()
    final = text.split("\nFROM ")[-1]
    ensure(final.startswith("gcr.io/distroless/static"), "the final stage is not distroless/static")
    user = re.search(r"^USER (\d+):(\d+)$", final, re.M)
    dep, _ = operator_container(render(OPERATOR))
    psc = dep["spec"]["template"]["spec"]["securityContext"]
    ensure(user is not None and (int(user.group(1)), int(user.group(2))) == (psc["runAsUser"], psc["runAsGroup"]),
           f"Dockerfile USER {user.group(0) if user else None} != chart runAsUser/runAsGroup {psc['runAsUser']}:{psc['runAsGroup']}")
    ensure('ENTRYPOINT ["/usr/local/bin/slurm-operator"]' in final and 'CMD ["run"]' in final, "entrypoint/cmd")
    ensure("--locked" in text and "--release" in text, "not a locked release build")
    ignored = {ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    # tools/: the workspace member tools/gen-client must exist for cargo to load the workspace.
    needed = {"src", "tools", "Cargo.toml", "Cargo.lock"}
    ensure(not (ignored & needed), f".dockerignore drops what the build needs: {ignored & needed}")
    ensure("target" in ignored, ".dockerignore keeps target/")
    return ""


# --- slurm-cluster chart ------------------------------------------------------------------------

def slurm_conf(docs: list[dict]) -> dict[str, Any]:
    cm = next(d for d in find(docs, "ConfigMap") if "slurm.conf" in d.get("data", {}))
    text = cm["data"]["slurm.conf"]
    params: dict[str, Any] = {"_text": text, "NodeSet": {}, "PartitionName": {}}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = dict(w.split("=", 1) for w in line.split())
        first = line.split("=", 1)[0]
        if first in ("NodeSet", "PartitionName"):
            params[first][words[first]] = words
        else:
            ensure(len(words) == 1, f"slurm.conf line with several parameters: {line}")
            ensure(first not in params, f"slurm.conf sets {first} twice")
            params[first] = words[first]
    return params


def slurmd_args(ns: dict) -> dict[str, str]:
    c = next(c for c in ns["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd")
    ensure(c["command"] == ["slurmd"], f"{ns['metadata']['name']}: command {c['command']}")
    a = c["args"]
    ensure("-D" in a and "-Z" in a, f"slurmd not foreground+dynamic: {a}")
    return {"conf-server": a[a.index("--conf-server") + 1], "N": a[a.index("-N") + 1], "conf": a[a.index("--conf") + 1]}


def mib(q: Any) -> int:
    from crdschema import quantity_value
    return int(quantity_value(str(q)) // 2**20)


def service_named(docs: list[dict], host: str) -> dict:
    """The Service a host name names: `<name>` (the client's own namespace) or
    `<name>.<namespace>.svc`, which resolves from any namespace."""
    name, _, rest = host.partition(".")
    svc = one(docs, "Service", name)
    if rest:
        ensure(rest == f"{svc['metadata'].get('namespace')}.svc", f"{host} is not Service {name}'s name")
    return svc


def check_cluster_wiring(docs: list[dict]) -> list[str]:
    """The objects of one slurm-cluster render agree with each other."""
    errs: list[str] = []
    conf = slurm_conf(docs)
    sts = next(d for d in find(docs, "StatefulSet") if d["metadata"]["name"].endswith("-slurmctld"))
    ctld_svc = one(docs, "Service", sts["spec"]["serviceName"])
    if ctld_svc["spec"].get("clusterIP") != "None":
        errs.append("slurmctld Service is not headless")
    # The Service's namespaced name: slurmd pods of SlurmNodeSets in other namespaces
    # (cluster.nodeSetNamespaces) resolve a bare name in their own namespace.
    ctld_host = f"{ctld_svc['metadata']['name']}.{ctld_svc['metadata']['namespace']}.svc"
    host = f"{sts['metadata']['name']}-0({ctld_host})"
    if conf["SlurmctldHost"] != host:
        errs.append(f"SlurmctldHost={conf['SlurmctldHost']}, want {host} (pod 0's hostname and the Service)")
    for key in ("AuthType", "AuthAltTypes", "AuthAltParameters", "SlurmctldParameters", "MaxNodeCount"):
        if key not in conf:
            errs.append(f"slurm.conf has no {key}")
    if "enable_configless" not in conf.get("SlurmctldParameters", ""):
        errs.append("slurm.conf: configless is not enabled")
    restd = next(d for d in find(docs, "Deployment") if d["metadata"]["name"].endswith("-slurmrestd"))
    rc = restd["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in rc["env"]}
    if env.get("SLURM_JWT") != "daemon":
        errs.append("slurmrestd without SLURM_JWT=daemon")
    psc = restd["spec"]["template"]["spec"]["securityContext"]
    slurm_uid = sts["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    if psc.get("runAsUser") in (0, None, slurm_uid):
        errs.append(f"slurmrestd runs as uid {psc.get('runAsUser')} (must be neither root nor SlurmUser {slurm_uid})")
    if rc["args"][:2] != ["-a", "rest_auth/jwt"]:
        errs.append(f"slurmrestd args {rc['args']}")
    accounting = "AccountingStorageType" in conf
    plugins = rc["args"][rc["args"].index("-s") + 1]
    if plugins != ("slurmctld,slurmdbd" if accounting else "slurmctld"):
        errs.append(f"slurmrestd -s {plugins} with accounting={accounting}")
    if accounting:
        # Qualified like SlurmctldHost: jobs in other namespaces run sacct with this slurm.conf.
        dbd_host = conf["AccountingStorageHost"]
        if "." not in dbd_host:
            errs.append(f"AccountingStorageHost={dbd_host} resolves only in the release's namespace")
        dbd_svc = service_named(docs, dbd_host)
        if str(dbd_svc["spec"]["ports"][0]["port"]) != conf["AccountingStoragePort"]:
            errs.append("AccountingStoragePort != slurmdbd Service port")
    restd_svc = one(docs, "Service", restd["metadata"]["name"])
    clusters = find(docs, "SlurmCluster")
    all_secrets = find(docs, "Secret")
    vols = sts["spec"]["template"]["spec"]["volumes"]
    ctld_jwt = [s["secret"] for v in vols for s in (v.get("projected") or {}).get("sources", [])
                if "secret" in s and s["secret"]["items"][0]["path"] == "jwt_hs256.key"]
    if len(ctld_jwt) != 1:
        errs.append(f"slurmctld mounts {len(ctld_jwt)} JWT keys")
    ctld_key = [d["data"][ctld_jwt[0]["items"][0]["key"]] for d in all_secrets
                if ctld_jwt and d["metadata"]["name"] == ctld_jwt[0]["name"] and d["metadata"]["namespace"] == sts["metadata"]["namespace"]]
    for cl in clusters:
        if "namespace" in cl["metadata"]:
            errs.append(f"SlurmCluster {cl['metadata']['name']} has a namespace: it is cluster-scoped")
        ep = cl["spec"]["endpoint"]
        want = f"http://{restd_svc['metadata']['name']}.{restd_svc['metadata']['namespace']}.svc.cluster.local:{restd_svc['spec']['ports'][0]['port']}"
        if ep != want:
            errs.append(f"SlurmCluster endpoint {ep}, want {want}")
        if cl["spec"].get("allowInsecureHttp", False) != ep.startswith("http://"):
            errs.append(f"SlurmCluster allowInsecureHttp={cl['spec'].get('allowInsecureHttp')} with endpoint {ep}")
        ref = cl["spec"]["auth"]["jwt"]["keySecretRef"]
        if cl["spec"]["auth"]["jwt"]["user"] != conf.get("SlurmUser", "slurm"):
            errs.append(f"SlurmCluster auth.jwt.user {cl['spec']['auth']['jwt']['user']} is not SlurmUser {conf.get('SlurmUser')}")
        # The operator reads it from its credentials namespace, only when labelled.
        named = [d for d in all_secrets if d["metadata"]["name"] == ref["name"]]
        usable = [d for d in named if (d["metadata"].get("labels") or {}).get("slurm.rs/credentials") == "true"]
        if named and not usable:
            errs.append(f"SlurmCluster names Secret {ref['name']}, rendered without the slurm.rs/credentials label")
        if len(usable) > 1:
            errs.append(f"several labelled Secrets named {ref['name']}: {[d['metadata']['namespace'] for d in usable]}")
        for d in usable:
            if d["data"].get(ref["key"]) is None:
                errs.append(f"Secret {d['metadata']['namespace']}/{ref['name']} has no key {ref['key']}")
            elif ctld_key and d["data"][ref["key"]] != ctld_key[0]:
                errs.append(f"the operator's JWT key {d['metadata']['namespace']}/{ref['name']} differs from the one slurmctld mounts")
    for ns in find(docs, "SlurmNodeSet"):
        name = ns["metadata"]["name"]
        if ns["metadata"].get("namespace") != sts["metadata"]["namespace"]:
            errs.append(f"{name}: not in the release namespace, where slurmctld's Service and the keys are")
        if clusters and ns["spec"]["clusterName"] != clusters[0]["metadata"]["name"]:
            errs.append(f"{name}: clusterName {ns['spec']['clusterName']} is not the SlurmCluster")
        # The operator acts only for SlurmNodeSets in a namespace the SlurmCluster lists.
        if clusters and ns["metadata"].get("namespace") not in (clusters[0]["spec"].get("nodeSetNamespaces") or []):
            errs.append(f"{name}: its namespace is not in the SlurmCluster's nodeSetNamespaces (NodeSetNotAllowed)")
        a = slurmd_args(ns)
        if a["conf-server"] != f"{ctld_host}:6817":
            errs.append(f"{name}: --conf-server {a['conf-server']}")
        if a["N"] != "$(POD_NAME)":
            errs.append(f"{name}: node name {a['N']} is not the pod name")
        s = ns["spec"]["slurm"]
        conf_words = dict(w.split("=", 1) for w in a["conf"].split())
        if conf_words.get("Features", "").split(",") != s["features"]:
            errs.append(f"{name}: --conf Features {conf_words.get('Features')} != spec.slurm.features {s['features']}")
        if conf_words.get("Gres") != s.get("gres"):
            errs.append(f"{name}: --conf Gres {conf_words.get('Gres')} != spec.slurm.gres {s.get('gres')}")
        if ("CPUs" in conf_words) != ("cpus" in s) or ("cpus" in s and int(conf_words["CPUs"]) != s["cpus"]):
            errs.append(f"{name}: --conf CPUs {conf_words.get('CPUs')} != spec.slurm.cpus {s.get('cpus')}")
        if ("RealMemory" in conf_words) != ("realMemory" in s) or ("realMemory" in s and int(conf_words["RealMemory"]) != mib(s["realMemory"])):
            errs.append(f"{name}: --conf RealMemory {conf_words.get('RealMemory')} != spec.slurm.realMemory {s.get('realMemory')} in MiB")
        set_name = s["features"][0]
        if conf["NodeSet"].get(set_name, {}).get("Feature") != set_name:
            errs.append(f"{name}: slurm.conf has no NodeSet={set_name} Feature={set_name}")
        for p in s["partitions"]:
            line = conf["PartitionName"].get(p)
            if not line:
                errs.append(f"{name}: partition {p} is not in slurm.conf")
            elif set_name not in line.get("Nodes", "").split(",") and line.get("Nodes") != "ALL":
                errs.append(f"{name}: partition {p} Nodes={line.get('Nodes')} leaves out {set_name}")
        if s.get("gres"):
            for g in s["gres"].split(","):
                if g.split(":")[0] not in conf.get("GresTypes", "").split(","):
                    errs.append(f"{name}: gres {g} but GresTypes={conf.get('GresTypes')}")
        if not any(v.get("projected") for v in ns["spec"]["template"]["spec"]["volumes"]):
            errs.append(f"{name}: no slurm.key volume")
    # An autoscaled set renders no replicas (the CRD's default, 1, applies); the model checks its
    # maxReplicas against MaxNodeCount (schema cases).
    total = sum(ns["spec"].get("replicas", 1) for ns in find(docs, "SlurmNodeSet"))
    if total > int(conf["MaxNodeCount"]):
        errs.append(f"SlurmNodeSets total {total} > MaxNodeCount {conf['MaxNodeCount']}")
    defaults = [p for p, w in conf["PartitionName"].items() if w.get("Default") == "YES"]
    if len(defaults) > 1:
        errs.append(f"several default partitions: {defaults}")
    return errs


def t_cluster_wiring(values: tuple[str, ...]) -> Callable[[], str]:
    def run() -> str:
        errs = check_cluster_wiring(render(CLUSTER, values))
        ensure(not errs, "\n  " + "\n  ".join(errs))
        return ""
    return run


def t_cluster_daemons_secure() -> str:
    docs = render(CLUSTER, sets=("accounting.enabled=true", "login.enabled=true"), cache=False)
    errs = []
    for d in find(docs, "StatefulSet") + find(docs, "Deployment"):
        spec = d["spec"]["template"]["spec"]
        psc = spec.get("securityContext") or {}
        if not psc.get("runAsNonRoot"):
            errs.append(f"{d['metadata']['name']}: not runAsNonRoot")
        for c in containers(d["spec"]["template"]):
            sc = c.get("securityContext") or {}
            if sc.get("allowPrivilegeEscalation") is not False or sc.get("capabilities", {}).get("drop") != ["ALL"]:
                errs.append(f"{d['metadata']['name']}/{c['name']}: escalation allowed or capabilities kept")
            if not (c.get("resources") or {}).get("limits", {}).get("memory"):
                errs.append(f"{d['metadata']['name']}/{c['name']}: no memory limit")
    # /etc/slurm (an emptyDir, 0777 as the kubelet makes it) holds the keys: only the init
    # container that fills it may write it. In slurmd's container the tenants' jobs run, and a
    # writable directory would let any of them replace slurm.key for slurmd's next start.
    daemons = find(docs, "StatefulSet") + find(docs, "Deployment") + find(docs, "SlurmNodeSet")
    ensure(find(docs, "SlurmNodeSet"), "no SlurmNodeSet rendered")
    for d in daemons:
        for c in d["spec"]["template"]["spec"].get("containers") or []:
            for m in c.get("volumeMounts") or []:
                if m.get("mountPath") == "/etc/slurm" and m.get("readOnly") is not True:
                    errs.append(f"{d['kind']} {d['metadata']['name']}/{c['name']}: /etc/slurm writable")
    # /run/slurmd (slurmd's PID file), an emptyDir too: the init container makes it root's
    # alone before slurmd starts, or a job could swap the PID file for a symlink root truncates.
    for d in find(docs, "SlurmNodeSet"):
        spec = d["spec"]["template"]["spec"]
        slurmd = next(c for c in spec["containers"] if c["name"] == "slurmd")
        run = next((m for m in slurmd.get("volumeMounts") or [] if m["mountPath"] == "/run/slurmd"), None)
        init = next((c for c in spec.get("initContainers") or [] if c["name"] == "init-config"), None)
        if run is None or init is None:
            errs.append(f"SlurmNodeSet {d['metadata']['name']}: no /run/slurmd mount or no init-config container")
            continue
        mounted = [m for m in init.get("volumeMounts") or [] if m["name"] == run["name"]]
        script = "\n".join(init.get("command") or [])
        if mounted != [{"name": run["name"], "mountPath": "/run/slurmd"}] or "chmod 0755 /run/slurmd" not in script:
            errs.append(f"SlurmNodeSet {d['metadata']['name']}: /run/slurmd left world-writable ({mounted}, {script!r})")
    # Every pod, slurmd's too (root, privileged with slurm.cgroup): the runtime's seccomp
    # profile by default (the README's Pod Security table); an admin may override it per set.
    for sets in ((), ("slurm.cgroup.enabled=true",)):
        for d in daemons if not sets else find(render(CLUSTER, sets=sets, cache=False), "SlurmNodeSet"):
            psc = d["spec"]["template"]["spec"].get("securityContext") or {}
            if psc.get("seccompProfile") != {"type": "RuntimeDefault"}:
                errs.append(f"{d['kind']} {d['metadata']['name']}{' with ' + ', '.join(sets) if sets else ''}: "
                            f"pod seccompProfile {psc.get('seccompProfile')}, want RuntimeDefault")
    # Tenants' jobs run in slurmd's container, beside slurm.key: no setuid program takes one to
    # root (allowPrivilegeEscalation: false), but in a privileged container, which Kubernetes
    # refuses it in (slurm.cgroup.privileged, or a set's own securityContext).
    def escalation(sets):
        spec = one(render(CLUSTER, sets=sets, cache=False), "SlurmNodeSet")["spec"]["template"]["spec"]
        return {c["name"]: (c.get("securityContext") or {})
                for c in spec["containers"] + (spec.get("initContainers") or [])}
    for sets, want in (((), {"slurmd": False, "init-config": False}),
                       (("slurm.cgroup.enabled=true",), {"slurmd": None, "init-config": False}),
                       (("nodesets.compute.securityContext.privileged=true",), {"slurmd": None, "init-config": None}),
                       (("nodesets.compute.securityContext.capabilities.add={CAP_SYS_ADMIN}",),
                        {"slurmd": None, "init-config": None})):
        got = escalation(sets)
        for name, value in want.items():
            sc = got.get(name, {})
            sys_admin = "CAP_SYS_ADMIN" in (sc.get("capabilities") or {}).get("add", [])
            if sc.get("allowPrivilegeEscalation") is not value or (value is None and not (sc.get("privileged") or sys_admin)):
                errs.append(f"SlurmNodeSet {name}{' with ' + ', '.join(sets) if sets else ''}: securityContext {sc}")
    # The login pod's shell (as SlurmUser, slurm.key readable) reads no startup file from the
    # shared volume, which tenants' jobs write to.
    login = one([d for d in render(CLUSTER, sets=("login.enabled=true", "sharedVolume.enabled=true",
                                                  "sharedVolume.nfs.server=nfs.example", "sharedVolume.nfs.path=/export"),
                                   cache=False)
                 if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-login")], "Deployment")
    env = {e["name"]: e.get("value") for c in containers(login["spec"]["template"]) for e in c.get("env") or []}
    shared = [m["mountPath"] for c in containers(login["spec"]["template"]) for m in c.get("volumeMounts") or []
              if m["name"] == "shared"]
    if not shared or any(str(env.get("HOME", "")).startswith(p) for p in shared):
        errs.append(f"login: HOME {env.get('HOME')} on the shared volume {shared}")
    ns = one(render(CLUSTER, sets=("nodesets.compute.podSecurityContext.seccompProfile.type=Localhost",
                                   "nodesets.compute.podSecurityContext.seccompProfile.localhostProfile=slurmd.json",
                                   "nodesets.compute.podSecurityContext.fsGroup=401"), cache=False), "SlurmNodeSet")
    psc = ns["spec"]["template"]["spec"].get("securityContext")
    if psc != {"seccompProfile": {"type": "Localhost", "localhostProfile": "slurmd.json"}, "fsGroup": 401}:
        errs.append(f"nodesets.compute.podSecurityContext not applied over the default: {psc}")
    ns = one(render(CLUSTER, sets=("nodesetDefaults.podSecurityContext.seccompProfile=null",), cache=False), "SlurmNodeSet")
    if "securityContext" in ns["spec"]["template"]["spec"]:
        errs.append(f"seccompProfile=null leaves {ns['spec']['template']['spec']['securityContext']}")
    ensure(not errs, "\n  " + "\n  ".join(errs))
    return ("slurmctld, slurmrestd, slurmdbd, MariaDB, login; /etc/slurm read-only in every daemon, slurmd's too; "
            "RuntimeDefault seccomp in every pod, slurmd's too; no privilege escalation in slurmd's containers but privileged; "
            "the login shell's HOME off the shared volume")


VERSION_LABELS = ("helm.sh/chart", "app.kubernetes.io/version")


def bumped_chart(chart: Path, tmp: str) -> Path:
    """A copy of `chart` whose Chart.yaml has another version and appVersion."""
    dest = Path(tmp) / chart.name
    shutil.copytree(chart, dest)
    meta = dest / "Chart.yaml"
    text = re.sub(r"^version: .*$", "version: 99.0.0", meta.read_text(), count=1, flags=re.M)
    meta.write_text(re.sub(r"^appVersion: .*$", 'appVersion: "99.0.0"', text, count=1, flags=re.M))
    return dest


def t_pod_templates_version_stable() -> str:
    """No pod template of either chart carries helm.sh/chart or app.kubernetes.io/version (a
    chart version bump would restart every daemon), selectors stay what they were (immutable),
    and a copy of the chart with another version and appVersion renders the same pod templates
    (the slurm.conf checksum does not cover the ConfigMap's labels), while a slurm.conf change
    still changes the checksum of the pods that read it."""
    cases = [(OPERATOR, (), ()), (OPERATOR, (), ("networkPolicy.enabled=true", "replicas=2", "leaderElection.enabled=true")),
             (CLUSTER, (), ("accounting.enabled=true", "login.enabled=true"))]
    cases += [(c, (v,), ()) for c in (OPERATOR, CLUSTER) for v in ci_values(c)]
    want_selector = {OPERATOR: {"app.kubernetes.io/name", "app.kubernetes.io/instance"},
                     CLUSTER: {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}}
    errs, n = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for chart, values, sets in cases:
            # The operator's image tag defaults to appVersion: pin it so only the labels could differ.
            pin = ("image.tag=0.1.0",) if chart == OPERATOR else ()
            docs = render(chart, values, sets + pin, cache=False)
            for owner, tmpl, selector in pod_templates(docs):
                n += 1
                labels = tmpl["metadata"].get("labels") or {}
                for k in VERSION_LABELS:
                    if k in labels:
                        errs.append(f"{rel_name(chart)} {owner}: pod template label {k}={labels[k]}")
                if selector is not None:
                    if set(selector) != want_selector[chart]:
                        errs.append(f"{rel_name(chart)} {owner}: selector {selector} changed")
                    if any(labels.get(k) != v for k, v in selector.items()):
                        errs.append(f"{rel_name(chart)} {owner}: pod labels {labels} do not carry the selector {selector}")
            other = bumped_chart(chart, tempfile.mkdtemp(dir=tmp))
            bumped = render(other, values, sets + pin, cache=False)
            before = {o: t for o, t, _ in pod_templates(docs)}
            after = {o: t for o, t, _ in pod_templates(bumped)}
            for owner in sorted(set(before) | set(after)):
                if before.get(owner) != after.get(owner):
                    errs.append(f"{rel_name(chart)} {' '.join(values + sets)}: {owner}'s pod template changes with the chart version")
    sums = []
    for debug in ("info", "debug"):
        docs = render(CLUSTER, sets=("login.enabled=true", f"slurm.debug={debug}"), cache=False)
        sums.append({o: (t["metadata"].get("annotations") or {}).get("checksum/slurm-conf") for o, t, _ in pod_templates(docs)
                     if o.split("/")[1] in ("test-slurmctld", "test-slurmrestd", "test-login")})
    if len(sums[0]) != 3 or not all(sums[0][o] and sums[0][o] != sums[1][o] for o in sums[0]):
        errs.append(f"a slurm.conf change does not change checksum/slurm-conf of slurmctld, slurmrestd, login: {sums}")
    ensure(not errs, "\n  " + "\n  ".join(errs))
    return f"{n} pod templates in {len(cases)} renders, unchanged by a chart version bump"


def t_cluster_startup_probes() -> str:
    def probes(sets: tuple[str, ...], name: str) -> tuple[dict, dict]:
        docs = render(CLUSTER, sets=("accounting.enabled=true", *sets))
        kind = "StatefulSet" if name == "slurmctld" else "Deployment"
        daemon = next(c for c in containers(one(docs, kind, f"test-{name}")["spec"]["template"]) if c["name"] == name)
        return daemon["startupProbe"], daemon["livenessProbe"]
    found = []
    for name, default in (("slurmctld", 600), ("slurmdbd", 3600)):
        startup, liveness = probes((), name)
        ensure(startup["periodSeconds"] * startup["failureThreshold"] == default, f"{name}: {startup}")
        ensure("initialDelaySeconds" not in liveness, f"{name}: liveness waits for the startup probe: {liveness}")
        found.append(f"{name} {default} s")
    key = "accounting.slurmdbd.startupTimeout"
    startup, _ = probes((f"{key}=7200",), "slurmdbd")
    ensure(startup["failureThreshold"] == 720, str(startup))
    ensure("minimum" in render_fail(CLUSTER, (f"{key}=5",)), "a startup timeout under 30 s is refused")
    return ", ".join(found) + "; raised for a database conversion"


def t_cluster_slurm_conf_defaults() -> str:
    docs = render(CLUSTER)
    conf = slurm_conf(docs)
    ensure(conf["ClusterName"] == "test", conf["ClusterName"])
    ensure(conf["MaxNodeCount"] == "1024", "MaxNodeCount")
    ensure(conf["AuthAltParameters"] == "jwt_key=/etc/slurm/jwt_hs256.key,disable_token_creation",
           "jwt key path; token creation left to SlurmUser (a tenant's job could mint itself one)")
    ensure(conf["PartitionName"]["debug"] == {"PartitionName": "debug", "Nodes": "compute", "Default": "YES",
                                              "MaxTime": "INFINITE", "State": "UP"}, str(conf["PartitionName"]))
    ensure("AccountingStorageType" not in conf and "GresTypes" not in conf, "accounting/gres lines without accounting/gres")
    ns = one(docs, "SlurmNodeSet")
    ensure(ns["spec"]["slurm"] == {"features": ["compute"], "partitions": ["debug"], "cpus": 1, "realMemory": "1Gi"},
           str(ns["spec"]["slurm"]))
    ensure(slurmd_args(ns)["conf"] == "Features=compute CPUs=1 RealMemory=1024", slurmd_args(ns)["conf"])
    # slurm.config overrides and removes chart defaults
    conf = slurm_conf(render(CLUSTER, sets=("slurm.config.SchedulerParameters=batch_sched_delay=0",
                                            "slurm.config.TreeWidth=", "clusterName=hpc1", "slurm.maxNodeCount=16"), cache=False))
    ensure(conf.get("SchedulerParameters") == "batch_sched_delay=0" and "TreeWidth" not in conf, "slurm.config not applied")
    ensure(conf["ClusterName"] == "hpc1" and conf["MaxNodeCount"] == "16", "clusterName/maxNodeCount not applied")
    # With accounting, Slurm enforces associations, limits and QoS (what keeps a job's script to
    # its team's accounts); slurm.config may say otherwise, and an access entry's accounts and QoS
    # render where what it sets still enforces them.
    conf = slurm_conf(render(CLUSTER, sets=("accounting.enabled=true",), cache=False))
    ensure(conf.get("AccountingStorageEnforce") == "associations,limits,qos", f"AccountingStorageEnforce={conf.get('AccountingStorageEnforce')}")
    tenant = ("cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=alice", "cluster.access[0].accounts={team-a}",
              "cluster.access[0].qos={normal}")
    docs = render(CLUSTER, sets=("accounting.enabled=true", "slurm.config.AccountingStorageEnforce=Limits\\,QOS") + tenant, cache=False)
    ensure(slurm_conf(docs).get("AccountingStorageEnforce") == "Limits,QOS", "slurm.config.AccountingStorageEnforce not applied")
    ensure(one(docs, "SlurmCluster")["spec"]["access"][0]["qos"] == ["normal"], "the access entry is not rendered")
    return ""


def t_cluster_cgroup() -> str:
    """slurm.cgroup: off by default (Slurm's process tracking only); on, slurm.conf confines jobs
    with cgroups, cgroup.conf is served next to slurm.conf, and slurmd runs privileged."""
    docs = render(CLUSTER)
    conf = slurm_conf(docs)
    ensure(conf["ProctrackType"] == "proctrack/linuxproc" and conf["TaskPlugin"] == "task/none", "defaults changed")
    cm = next(d for d in find(docs, "ConfigMap") if "slurm.conf" in d.get("data", {}))
    ensure("cgroup.conf" not in cm["data"], "cgroup.conf without slurm.cgroup.enabled")
    slurmd = next(c for c in one(docs, "SlurmNodeSet")["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd")
    ensure(not (slurmd.get("securityContext") or {}).get("privileged"), "slurmd privileged without cgroups")

    sets = ("slurm.cgroup.enabled=true", "accounting.enabled=true", "slurm.cgroup.config.ConstrainSwapSpace=",
            "slurm.cgroup.config.AllowedRAMSpace=95", "nodesets.compute.securityContext.runAsUser=0")
    docs = render(CLUSTER, sets=sets, cache=False)
    conf = slurm_conf(docs)
    ensure(conf["ProctrackType"] == "proctrack/cgroup", f"ProctrackType={conf['ProctrackType']}")
    ensure(conf["TaskPlugin"] == "task/cgroup,task/affinity", f"TaskPlugin={conf['TaskPlugin']}")
    ensure(conf["JobAcctGatherType"] == "jobacct_gather/cgroup", f"JobAcctGatherType={conf['JobAcctGatherType']}")
    cm = next(d for d in find(docs, "ConfigMap") if "slurm.conf" in d.get("data", {}))
    cg = dict(line.split("=", 1) for line in cm["data"].get("cgroup.conf", "").splitlines() if line and not line.startswith("#"))
    ensure(cg == {"AllowedRAMSpace": "95", "CgroupPlugin": "autodetect", "ConstrainCores": "yes", "ConstrainDevices": "yes",
                  "ConstrainRAMSpace": "yes", "IgnoreSystemd": "yes"}, f"cgroup.conf {cg}")
    for ns in find(docs, "SlurmNodeSet"):
        slurmd = next(c for c in ns["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd")
        ensure(slurmd.get("securityContext") == {"privileged": True, "runAsUser": 0},
               f"{ns['metadata']['name']}: slurmd securityContext {slurmd.get('securityContext')}")
    # Opting out of privileged keeps the values' securityContext as it is.
    docs = render(CLUSTER, sets=("slurm.cgroup.enabled=true", "slurm.cgroup.privileged=false"), cache=False)
    slurmd = next(c for c in one(docs, "SlurmNodeSet")["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd")
    ensure(slurmd.get("securityContext") == {"allowPrivilegeEscalation": False},
           f"privileged=false: {slurmd.get('securityContext')}")
    err = render_fail(CLUSTER, ("slurm.cgroup.enabled=true", "slurm.extraConfigFiles.cgroup\\.conf=x"))
    ensure("slurm.cgroup.config" in err, err)
    return "proctrack/cgroup, task/cgroup, cgroup.conf, privileged slurmd"


def t_cluster_slurmctld_metrics() -> str:
    """slurmctld.metrics: MetricsType in slurm.conf and a ServiceMonitor with one endpoint per
    path on the slurmctld Service's port; refused with PrivateData (Slurm then serves none)."""
    docs = render(CLUSTER)
    ensure("MetricsType" not in slurm_conf(docs), "MetricsType without slurmctld.metrics.enabled")
    ensure(not find(docs, "ServiceMonitor"), "a ServiceMonitor by default")
    docs = render(CLUSTER, sets=("slurmctld.metrics.enabled=true", "slurmctld.metrics.serviceMonitor.enabled=true",
                                 "slurmctld.metrics.serviceMonitor.labels.release=prom"), cache=False)
    ensure(slurm_conf(docs)["MetricsType"] == "metrics/openmetrics", "MetricsType")
    sm = one(docs, "ServiceMonitor")
    svc = next(d for d in find(docs, "Service") if any(p["name"] == "slurmctld" for p in d["spec"]["ports"]))
    ensure(all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items()),
           f"the ServiceMonitor selects {sm['spec']['selector']} but the slurmctld Service has {svc['metadata']['labels']}")
    others = [d["metadata"]["name"] for d in find(docs, "Service") if d is not svc
              and all(d["metadata"].get("labels", {}).get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())]
    ensure(not others, f"the ServiceMonitor also selects {others}")
    ensure(sm["metadata"]["labels"].get("release") == "prom", "serviceMonitor.labels")
    ensure([(e["port"], e["path"]) for e in sm["spec"]["endpoints"]]
           == [("slurmctld", f"/metrics/{e}") for e in ("jobs", "nodes", "partitions", "scheduler")], str(sm["spec"]["endpoints"]))
    ensure(any(p["name"] == "slurmctld" and p["port"] == 6817 for p in svc["spec"]["ports"]), "slurmctld port")
    err = render_fail(CLUSTER, ("slurmctld.metrics.enabled=true", "slurm.config.PrivateData=jobs"))
    ensure("PrivateData" in err, err)
    err = render_fail(CLUSTER, ("slurmctld.metrics.serviceMonitor.enabled=true",))
    ensure("slurmctld.metrics.enabled" in err, err)
    return "MetricsType, ServiceMonitor per endpoint, PrivateData refused"


def t_cluster_memory_conversion() -> str:
    cases = [("1Gi", 1024), ("1500Mi", 1500), ("2G", 1907), ("1073741824", 1024), ("0.5Gi", 512), ("1Ti", 1048576), ("3000M", 2861)]
    bad = []
    for q, want in cases:
        docs = render(CLUSTER, sets=(f"nodesets.compute.resources.limits.memory={q}",), cache=False)
        got = slurmd_args(one(docs, "SlurmNodeSet"))["conf"]
        if f"RealMemory={want}" not in got.split():
            bad.append(f"{q}: {got}, want RealMemory={want}")
    docs = render(CLUSTER, sets=("nodesets.compute.resources.limits.cpu=500m", "nodesets.compute.realMemory=64Gi"), cache=False)
    ns = one(docs, "SlurmNodeSet")
    if "cpus" in ns["spec"]["slurm"] or "CPUs=" in slurmd_args(ns)["conf"]:
        bad.append("a fractional CPU limit became CPUs=")
    if "RealMemory=65536" not in slurmd_args(ns)["conf"] or ns["spec"]["slurm"]["realMemory"] != "64Gi":
        bad.append(f"explicit realMemory 64Gi: {slurmd_args(ns)['conf']}")
    ensure(not bad, "\n  " + "\n  ".join(bad))
    return f"{len(cases) + 1} quantities"


def t_cluster_partitions() -> str:
    docs = render(CLUSTER, sets=(
        "nodesets.gpu.replicas=1", "nodesets.gpu.gres=gpu:2", "nodesets.gpu.partitions={gpu,debug}",
        "partitions.gpu.maxTime=1-00:00:00", "partitions.all.allNodes=true", "partitions.empty.state=DOWN",
        "partitions.pick.nodesets={gpu}"), cache=False)
    p = slurm_conf(docs)["PartitionName"]
    ensure(p["debug"]["Nodes"] == "compute,gpu", f"debug: {p['debug']}")
    ensure(p["gpu"]["Nodes"] == "gpu" and p["gpu"]["MaxTime"] == "1-00:00:00" and "Default" not in p["gpu"], f"gpu: {p['gpu']}")
    ensure(p["all"]["Nodes"] == "ALL", f"all: {p['all']}")
    ensure("Nodes" not in p["empty"] and p["empty"]["State"] == "DOWN", f"empty: {p['empty']}")
    ensure(p["pick"]["Nodes"] == "gpu", f"pick: {p['pick']}")
    ensure(slurm_conf(docs)["GresTypes"] == "gpu", "GresTypes")
    errs = check_cluster_wiring(docs)
    ensure(not errs, "\n  " + "\n  ".join(errs))
    return ""


# --- slurm-cluster NetworkPolicies ----------------------------------------------------------------
#
# A small model of what Kubernetes admits: the pods a render makes (labels, namespace, named
# container ports; the slurmd pods as the operator makes them), pods around them, and the ingress
# rules of the rendered NetworkPolicies evaluated as a CNI does. The connections the daemons make
# are derived from the render itself (slurm.conf, slurmdbd.conf, the Services and the SlurmCluster).

NP_EXTRA_NS = "hpc-extra"  # a cluster.nodeSetNamespaces entry in the modes below


class NpPod:
    def __init__(self, role: str, namespace: str, labels: dict[str, str], ports: dict[str, int]):
        self.role, self.namespace, self.labels, self.ports = role, namespace, labels, ports

    def __repr__(self) -> str:
        return f"{self.role} ({self.namespace})"


def np_selects(sel: dict | None, labels: dict[str, str]) -> bool:
    """A LabelSelector: {} selects everything."""
    sel = sel or {}
    if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for e in sel.get("matchExpressions") or []:
        has, val = e["key"] in labels, labels.get(e["key"])
        if not {"In": has and val in e.get("values", []), "NotIn": not has or val not in e.get("values", []),
                "Exists": has, "DoesNotExist": not has}[e["operator"]]:
            return False
    return True


def np_admits(policies: list[dict], src: NpPod, dst: NpPod, port: int) -> bool:
    """Whether a TCP connection from src to dst:port is admitted (NetworkPolicy ingress rules)."""
    isolating = [p for p in policies if p["metadata"]["namespace"] == dst.namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"]) and np_selects(p["spec"]["podSelector"], dst.labels)]
    if not isolating:
        return True

    def peer_admits(peer: dict, policy_ns: str) -> bool:
        if "ipBlock" in peer:
            return False  # the model's pods have no address in a CIDR
        ns_sel = peer.get("namespaceSelector")
        ns_ok = src.namespace == policy_ns if ns_sel is None else np_selects(ns_sel, {"kubernetes.io/metadata.name": src.namespace})
        return ns_ok and ("podSelector" not in peer or np_selects(peer["podSelector"], src.labels))

    def port_admits(entry: dict) -> bool:
        if entry.get("protocol", "TCP") != "TCP":
            return False
        p = entry.get("port")
        if p is None:
            return True
        if isinstance(p, str):  # a named port: the destination pod's container port of that name
            return dst.ports.get(p) == port
        return p <= port <= entry.get("endPort", p)

    for pol in isolating:
        for rule in pol["spec"].get("ingress") or []:
            if rule.get("from") and not any(peer_admits(peer, pol["metadata"]["namespace"]) for peer in rule["from"]):
                continue
            if rule.get("ports") and not any(port_admits(e) for e in rule["ports"]):
                continue
            return True
    return False


def np_service_port(docs: list[dict], svc_name: str, port: int) -> int:
    """The container port that a connection to Service svc_name:port reaches (svc_name bare, or
    `<name>.<namespace>.svc`)."""
    svc = service_named(docs, svc_name)
    sp = [p for p in svc["spec"]["ports"] if p["port"] == port]
    ensure(len(sp) == 1, f"Service {svc_name} has no port {port}: {svc['spec']['ports']}")
    tp = sp[0].get("targetPort", port)
    if isinstance(tp, int):
        return tp
    for _, tmpl, _ in pod_templates(docs):
        if np_selects({"matchLabels": svc["spec"]["selector"]}, (tmpl.get("metadata") or {}).get("labels") or {}):
            for c in tmpl["spec"]["containers"]:
                for p in c.get("ports") or []:
                    if p.get("name") == tp:
                        return p["containerPort"]
    raise Failed(f"Service {svc_name}: targetPort {tp} is no container port of its pods")


def np_readme_values(tmp: str) -> str:
    """The README's example values for networkPolicy, as a values file."""
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", (CLUSTER / "README.md").read_text(), re.S) if "networkPolicy:" in b]
    ensure(len(blocks) == 1, f"helm/slurm-cluster/README.md has {len(blocks)} yaml blocks with networkPolicy")
    path = os.path.join(tmp, "np-readme-values.yaml")
    Path(path).write_text(blocks[0])
    return path


# (name, --set) on top of the README's example values; every mode admits the operator chart's
# pod installed in namespace slurm-operator (the README's example).
NP_MODES = [
    ("defaults", ()),
    ("accounting, login, metrics, nodeSetNamespaces",
     ("accounting.enabled=true", "login.enabled=true", "slurmctld.metrics.enabled=true", f"cluster.nodeSetNamespaces={{{NP_EXTRA_NS}}}")),
    ("SrunPortRange, slurmdbd port 7031, metricsFrom without metrics",
     ("accounting.enabled=true", "accounting.slurmdbd.port=7031", "login.enabled=true", "slurm.config.SrunPortRange=60001-63000",
      f"cluster.nodeSetNamespaces={{{NP_EXTRA_NS}}}")),
    ("SlurmdPort unset (Slurm's default), SrunPortRange, login",
     ("login.enabled=true", "slurm.config.SlurmdPort=null", "slurm.config.SrunPortRange=60001-63000")),
    ("SlurmdPort 7000, SrunPortRange, login",
     ("login.enabled=true", "slurm.config.SlurmdPort=7000", "slurm.config.SrunPortRange=60001-63000")),
    ("SrunPortRange in extraConfig, external database, slurmrestd port 8080",
     ("accounting.enabled=true", "accounting.mariadb.enabled=false", "accounting.external.host=db.example.org",
      "accounting.external.passwordSecret.name=db", "login.enabled=true", "slurmrestd.port=8080",
      "slurm.extraConfig=SrunPortRange=50000-50100")),
]


class NpModel:
    """One render with the policy on: its pods, the pods around them, its policies, and the
    connections the daemons make (from the render's own configuration)."""

    CHART_ROLES = ("slurmctld", "slurmd", "login", "slurmrestd", "slurmdbd", "mariadb")
    SLURMD = ("slurmd", "slurmd-extra")

    def __init__(self, values: str, sets: tuple[str, ...]):
        docs = render(CLUSTER, (values,), sets, cache=False)
        self.docs = docs
        self.policies = find(docs, "NetworkPolicy")
        ns = RELEASE_NS
        self.pods: list[NpPod] = []
        for owner, tmpl, _ in pod_templates(docs):
            labels = dict((tmpl.get("metadata") or {}).get("labels") or {})
            if owner.startswith("SlurmNodeSet/"):  # as the operator makes them (src/controller/nodeset/pods.rs)
                labels.update({"slurm.rs/nodeset": owner.split("/", 1)[1], "slurm.rs/template-hash": "abc"})
            ports = {p["name"]: p["containerPort"] for c in tmpl["spec"]["containers"] for p in c.get("ports") or [] if "name" in p}
            # Two pods of each SlurmNodeSet: a job's nodes talk to each other.
            for _ in range(2 if owner.startswith("SlurmNodeSet/") else 1):
                self.pods.append(NpPod(labels["app.kubernetes.io/component"], ns, labels, ports))
        conf = slurm_conf(docs)
        clusters = find(docs, "SlurmCluster")
        for extra in (clusters[0]["spec"]["nodeSetNamespaces"] if clusters else []):
            if extra != ns:  # a SlurmNodeSet's pod there, made by the operator from its own template
                self.pods.append(NpPod("slurmd-extra", extra, {"app": "gpu-nodes", "slurm.rs/nodeset": "gpu"}, {"slurmd": 6818}))
        # A SlurmNodeSet made by hand in the release namespace (always a nodeSetNamespace), its
        # template without the chart's labels and without a named port (as the docs' sets): the
        # chart's peers trust it, so its policies police it as the chart's slurmd.
        self.pods.append(NpPod("slurmd-extra", ns, {"app": "by-hand", "slurm.rs/nodeset": "by-hand"}, {}))
        # One whose template gives its nodes their own port (`--conf "Port=17001"`, which the
        # operator keeps), named slurmd.
        self.pods.append(NpPod("slurmd-extra", ns, {"app": "by-port", "slurm.rs/nodeset": "by-port"}, {"slurmd": 17001}))
        op = next(d for d in render(OPERATOR, namespace="slurm-operator") if d["kind"] == "Deployment")
        self.pods.append(NpPod("operator", "slurm-operator", op["spec"]["template"]["metadata"]["labels"], {"http-metrics": 8080}))
        self.pods.append(NpPod("prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"}, {}))
        self.pods.append(NpPod("stranger", ns, {"app": "other"}, {}))
        self.pods.append(NpPod("operator-ns-stranger", "slurm-operator", {"app": "other"}, {}))
        slurmd_labels = next(p.labels for p in self.pods if p.role == "slurmd") if any(p.role == "slurmd" for p in self.pods) else {}
        self.pods.append(NpPod("impostor", "team-a", dict(slurmd_labels, **{"slurm.rs/nodeset": "x"}), {}))
        # The ports the daemons connect to, from the configuration they read.
        ctld_svc, = re.findall(r"\((.+)\)$", conf["SlurmctldHost"])
        self.ctld_port = np_service_port(docs, ctld_svc, int(conf["SlurmctldPort"]))
        for nset in find(docs, "SlurmNodeSet"):
            host, port = slurmd_args(nset)["conf-server"].rsplit(":", 1)
            ensure(np_service_port(docs, host, int(port)) == self.ctld_port, f"{nset['metadata']['name']}: --conf-server {host}:{port}")
        self.slurmd_port = int(conf.get("SlurmdPort", 6818))  # unset: Slurm's default
        # The chart's slurmd pods name the port slurmd listens on (their readiness probe and
        # the policy's named-port rule use it).
        for pod in self.pods:
            if pod.role == "slurmd":
                ensure(pod.ports.get("slurmd") == self.slurmd_port,
                       f"{pod}: port slurmd {pod.ports.get('slurmd')} is not SlurmdPort {self.slurmd_port}")
        self.dbd_port = self.db_port = None
        if "AccountingStorageHost" in conf:
            self.dbd_port = np_service_port(docs, conf["AccountingStorageHost"], int(conf["AccountingStoragePort"]))
            dbd_conf = dict(ln.split("=", 1) for cm in find(docs, "ConfigMap") if "slurmdbd.conf" in cm.get("data", {})
                            for ln in cm["data"]["slurmdbd.conf"].splitlines() if "=" in ln)
            if find(docs, "Service", dbd_conf["StorageHost"]):
                self.db_port = np_service_port(docs, dbd_conf["StorageHost"], int(dbd_conf["StoragePort"]))
        restd = next(d for d in find(docs, "Service") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "slurmrestd")
        url_port = int(clusters[0]["spec"]["endpoint"].rsplit(":", 1)[1]) if clusters else restd["spec"]["ports"][0]["port"]
        self.restd_port = np_service_port(docs, restd["metadata"]["name"], url_port)
        self.srun = tuple(int(x) for x in conf["SrunPortRange"].split("-")) if "SrunPortRange" in conf else None
        self.metrics = "MetricsType" in conf
        extra_ports = {p for pod in self.pods for p in pod.ports.values()}
        extra_ports |= {self.ctld_port, self.slurmd_port, self.restd_port, self.dbd_port or 6819, self.db_port or 3306}
        if self.srun:
            extra_ports |= {self.srun[0] - 1, self.srun[0], self.srun[1], self.srun[1] + 1}
        self.ports = sorted(extra_ports | {22, 80, 443, 1024, 3306, 6817, 6818, 6819, 6820, 8080, 32768, 45000, 60999, 65535})

    def srun_port(self, port: int) -> bool:
        return self.srun is None or self.srun[0] <= port <= self.srun[1]

    def policed(self, pod: NpPod) -> bool:
        """The chart's pods, and the slurmd pods of the release namespace's SlurmNodeSets (the
        chart's peers trust them)."""
        return pod.namespace == RELEASE_NS and (pod.role in self.CHART_ROLES or pod.role in self.SLURMD)

    def expected(self, src: NpPod, dst: NpPod, port: int) -> bool:
        """The connections the daemons make (and the knobs admit); pods outside the chart are not policed."""
        s, d = src.role, dst.role
        if not self.policed(dst):
            return True
        d = "slurmd" if d in self.SLURMD else d
        if d == "slurmctld":
            return port == self.ctld_port and (s in self.SLURMD + ("login", "slurmrestd", "slurmdbd") or (s == "prometheus" and self.metrics))
        if d == "slurmd":  # nodes among themselves on any port (srun, MPI); slurmctld to slurmd and srun; login to slurmd
            # slurmd listens on SlurmdPort, or on its set's own Port= (its port named slurmd).
            slurmd = port in (self.slurmd_port, dst.ports.get("slurmd"))
            return (s in self.SLURMD or (s == "slurmctld" and (slurmd or self.srun_port(port)))
                    or (s == "login" and slurmd))
        if d == "login":  # to srun/salloc
            return s in ("slurmctld",) + self.SLURMD and self.srun_port(port)
        if d == "slurmrestd":
            return port == self.restd_port and s in ("login", "operator")
        if d == "slurmdbd":  # slurmctld, slurmrestd -s slurmdbd, sacct/sacctmgr in login and jobs
            return port == self.dbd_port and s in ("slurmctld", "slurmrestd", "login") + self.SLURMD
        return port == self.db_port and s == "slurmdbd"  # mariadb

    def connections(self) -> list[tuple[NpPod, NpPod, int, bool]]:
        return [(s, d, port, self.expected(s, d, port)) for d in self.pods for s in self.pods if s is not d for port in self.ports]


def np_models() -> list[tuple[str, NpModel]]:
    with tempfile.TemporaryDirectory() as tmp:
        values = np_readme_values(tmp)
        return [(name, NpModel(values, ("networkPolicy.enabled=true",) + sets)) for name, sets in NP_MODES]


def t_cluster_netpol_off_by_default() -> str:
    """networkPolicy.enabled is false by default: no NetworkPolicy, whatever else is on."""
    for sets in ((), ("accounting.enabled=true", "login.enabled=true", "slurmctld.metrics.enabled=true",
                      "networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus",
                      "networkPolicy.slurmrestdFrom[0].podSelector.matchLabels.app=operator")):
        docs = render(CLUSTER, sets=sets, cache=False)
        ensure(not find(docs, "NetworkPolicy"), f"NetworkPolicies with {sets or 'the defaults'}: {[d['metadata']['name'] for d in find(docs, 'NetworkPolicy')]}")
    return ""


def t_cluster_netpol_admits_daemons() -> str:
    """With the policy on, every connection a daemon makes to another is admitted, on the port the
    client's configuration names (slurm.conf's SlurmctldHost/Port, SlurmdPort, AccountingStorage*,
    SrunPortRange; slurmdbd.conf's StorageHost/Port; slurmd's --conf-server; the SlurmCluster's
    endpoint), resolved through the Service to the pod's port: slurmd <-> slurmctld (srun's
    ports too), slurmd <-> slurmd on any port, login -> slurmctld/slurmd/slurmrestd/slurmdbd and
    back to srun, slurmrestd -> slurmctld/slurmdbd, slurmctld -> slurmdbd -> MariaDB, slurmd pods
    of cluster.nodeSetNamespaces, the operator (README's example) -> slurmrestd, metricsFrom ->
    slurmctld with metrics on."""
    out, missing = [], []
    for name, m in np_models():
        n = 0
        for src, dst, port, want in m.connections():
            if want and m.policed(dst):
                n += 1
                if not np_admits(m.policies, src, dst, port):
                    missing.append(f"{name}: {src} -> {dst}:{port} refused")
        ensure(n, f"{name}: no connection to check")
        out.append(f"{name}: {n}")
    ensure(not missing, f"{len(missing)} refused:\n  " + "\n  ".join(missing[:40]))
    return "admitted connections per mode: " + "; ".join(out)


def t_cluster_netpol_admits_nothing_else() -> str:
    """With the policy on, every pod of the chart is isolated and admits nothing but the
    connections above: MariaDB only slurmdbd, slurmrestd only login and slurmrestdFrom (not the
    rest of the operator's namespace, not slurmd, whose jobs are the tenants'), metrics only with
    slurmctld.metrics.enabled, srun's ports only within SrunPortRange when set, nothing from a
    pod elsewhere that copies slurmd's labels or from the release namespace's other pods. The
    slurmd pods of a SlurmNodeSet made by hand in the release namespace (which the chart's peers
    trust) are policed as the chart's. One policy per component, Ingress only (egress left
    alone), each valid for Kubernetes."""
    out, extra, errs = [], [], []
    for name, m in np_models():
        n = 0
        for src, dst, port, want in m.connections():
            if not want:
                n += 1
                if np_admits(m.policies, src, dst, port):
                    extra.append(f"{name}: {src} -> {dst}:{port} admitted")
        for pod in m.pods:
            if m.policed(pod):
                sel = [p["metadata"]["name"] for p in m.policies if np_selects(p["spec"]["podSelector"], pod.labels)]
                if len(sel) != 1:
                    errs.append(f"{name}: {pod} selected by {sel}")
        roles = sorted({p.role for p in m.pods if p.namespace == RELEASE_NS and p.role in m.CHART_ROLES})
        for p in m.policies:
            if p["spec"].get("policyTypes") != ["Ingress"] or "egress" in p["spec"]:
                errs.append(f"{name}: {p['metadata']['name']}: policyTypes {p['spec'].get('policyTypes')}")
            errs += [f"{name}: {e}" for v in K8S_VERSIONS for e in validate_object(p, v)]
        if len(m.policies) != len(roles):
            errs.append(f"{name}: {len(m.policies)} policies for {roles}")
        out.append(f"{name}: {n}")
    ensure(not extra and not errs, f"{len(extra)} admitted that should not be:\n  " + "\n  ".join(extra[:40] + errs))
    return "refused connections per mode: " + "; ".join(out)


# --- secrets ------------------------------------------------------------------------------------

def secret_values(docs: list[dict], namespace: str = RELEASE_NS) -> dict[str, dict[str, bytes]]:
    """The Secrets of `namespace` (the release's by default; the operator's copy of the JWT key
    lives in its credentials namespace): name -> key -> value."""
    return {d["metadata"]["name"]: {k: base64.b64decode(v) for k, v in d["data"].items()}
            for d in find(docs, "Secret") if d["metadata"]["namespace"] == namespace}


def t_secrets_generated() -> str:
    sets = ("accounting.enabled=true",)
    a = secret_values(render(CLUSTER, sets=sets, cache=False))
    b = secret_values(render(CLUSTER, sets=sets, cache=False))
    jwt, key, db = "test-jwt-key", "test-slurm-key", "test-mariadb-db"
    ensure(set(a) == {jwt, key, db}, f"secrets {sorted(a)}")
    ensure(len(a[jwt]["jwt_hs256.key"]) == 64 and len(a[key]["slurm.key"]) == 1024, "key lengths")
    ensure(re.fullmatch(rb"[A-Za-z0-9]{32}", a[db]["password"]) is not None, "password is not 32 letters/digits")
    for name in a:  # no lookup in `helm template`: every render generates afresh, randomly
        for k in a[name]:
            ensure(a[name][k] != b[name][k], f"{name}/{k} is the same in two renders: not random")
    ensure(a[db]["password"] != a[db]["root-password"], "the two database passwords are equal")
    docs = render(CLUSTER, sets=sets, cache=False)
    for d in find(docs, "Secret"):
        kept = d["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep"
        if d["metadata"]["namespace"] == RELEASE_NS:
            ensure(kept, f"{d['metadata']['name']}: not kept")
        else:  # the operator's copy goes with the SlurmCluster that uses it
            ensure(not kept, f"{d['metadata']['namespace']}/{d['metadata']['name']}: the credentials copy is kept on uninstall")
    docs = render(CLUSTER, sets=("secrets.keep=false",), cache=False)
    ensure(all("helm.sh/resource-policy" not in d["metadata"].get("annotations", {}) for d in find(docs, "Secret")), "keep=false")
    return "fresh random keys on every render without a live Secret"


def t_secrets_reuse_logic() -> str:
    """The pure helper (no lookup) with a fake live Secret: it must return the live value."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "secrettest"
        (chart / "templates").mkdir(parents=True)
        (chart / "Chart.yaml").write_text("apiVersion: v2\nname: secrettest\nversion: 0.0.1\n")
        shutil.copy(CLUSTER / "templates" / "_secrets.tpl", chart / "templates" / "_secrets.tpl")
        (chart / "templates" / "out.yaml").write_text(textwrap.dedent("""\
            {{- $live := dict "data" (dict "jwt_hs256.key" "bGl2ZS1qd3Qta2V5" "password" "bGl2ZS1wYXNz") }}
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: out
            data:
              reusedKey: {{ include "slurm-cluster.secretValueFrom" (dict "existing" $live "key" "jwt_hs256.key" "generate" "bytes" "length" 64) | quote }}
              reusedPass: {{ include "slurm-cluster.secretValueFrom" (dict "existing" $live "key" "password" "generate" "alnum" "length" 32) | quote }}
              otherKey: {{ include "slurm-cluster.secretValueFrom" (dict "existing" $live "key" "slurm.key" "generate" "bytes" "length" 1024) | quote }}
              noSecret: {{ include "slurm-cluster.secretValueFrom" (dict "existing" dict "key" "jwt_hs256.key" "generate" "bytes" "length" 64) | quote }}
              nilSecret: {{ include "slurm-cluster.secretValueFrom" (dict "key" "password" "generate" "alnum" "length" 32) | quote }}
              viaLookup: {{ include "slurm-cluster.secretValue" (dict "ctx" . "name" "absent" "key" "k" "generate" "bytes" "length" 8) | quote }}
              onlyKept: {{ include "slurm-cluster.secretValueFrom" (dict "existing" $live "key" "jwt_hs256.key" "generate" "bytes" "length" 64 "only" "secrets.jwtKey.key") | quote }}
              onlyNew: {{ include "slurm-cluster.secretValueFrom" (dict "existing" dict "key" "slurm.key" "generate" "bytes" "length" 16 "only" "secrets.slurmKey.key") | quote }}
            """))
        p = helm("template", "x", str(chart))
        ensure(p.returncode == 0, p.stderr)
        data = yaml.safe_load(p.stdout)["data"]
        # A one-key Secret whose key name changed (secrets.*.key edited on an upgrade) fails,
        # naming the value, instead of rotating the key behind the running daemons' backs.
        (chart / "templates" / "renamed.yaml").write_text(textwrap.dedent("""\
            {{- $live := dict "data" (dict "jwt_hs256.key" "bGl2ZS1qd3Qta2V5") }}
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: renamed
            data:
              k: {{ include "slurm-cluster.secretValueFrom" (dict "existing" $live "key" "jwt.key" "generate" "bytes" "length" 64 "only" "secrets.jwtKey.key" "name" "test-jwt") | quote }}
            """))
        renamed = helm("template", "x", str(chart))
    ensure(renamed.returncode != 0 and 'secrets.jwtKey.key is "jwt.key"' in renamed.stderr
           and "Secret test-jwt holds jwt_hs256.key" in renamed.stderr,
           f"a renamed key was not refused, naming it: {renamed.stderr.strip() or 'rendered'}")
    ensure(data["onlyKept"] == "bGl2ZS1qd3Qta2V5", f"one-key Secret not reused: {data['onlyKept']}")
    ensure(len(base64.b64decode(data["onlyNew"])) == 16, "one-key Secret, none live: not generated")
    ensure(data["reusedKey"] == "bGl2ZS1qd3Qta2V5", f"live key not reused: {data['reusedKey']}")
    ensure(data["reusedPass"] == "bGl2ZS1wYXNz", f"live password not reused: {data['reusedPass']}")
    ensure(len(base64.b64decode(data["otherKey"])) == 1024, "a key missing from the live Secret is not generated")
    ensure(len(base64.b64decode(data["noSecret"])) == 64, "no live Secret: not generated")
    ensure(re.fullmatch(r"[A-Za-z0-9]{32}", base64.b64decode(data["nilSecret"]).decode()), "nil live Secret: not generated")
    ensure(len(base64.b64decode(data["viaLookup"])) == 8, "lookup path (nothing found offline) did not generate")
    # Statically: the lookup helper looks up the Secret by the name it writes, and every
    # generated value in secrets.yaml goes through it.
    tpl = (CLUSTER / "templates" / "_secrets.tpl").read_text()
    ensure(re.search(r'lookup "v1" "Secret" \.ctx\.Release\.Namespace \.name', tpl) is not None, "secretValue does not lookup the Secret")
    ensure('include "slurm-cluster.secretValueFrom" (dict "existing" $existing' in tpl, "secretValue does not pass the live Secret on")
    manifest = (CLUSTER / "templates" / "secrets.yaml").read_text()
    values = re.findall(r"^\s+[-\w{}. \"$]+: (\{\{.*\}\})\s*$", manifest, re.M)
    data_lines = [v for v in values if "secretValue" in v or "rand" in v]
    ensure(data_lines and all('include "slurm-cluster.secretValue"' in v and "$name" in v for v in data_lines),
           f"a Secret value bypasses slurm-cluster.secretValue or looks up another name: {data_lines}")
    ensure("rand" not in manifest, "secrets.yaml generates a value itself")
    return "live values reused, missing ones generated"


def t_secrets_existing() -> str:
    docs = render(CLUSTER, sets=("secrets.jwtKey.existingSecret=my-jwt", "secrets.jwtKey.key=key.bin",
                                 "secrets.slurmKey.existingSecret=my-slurm-key",
                                 "cluster.credentials.existingSecret=my-operator-jwt"), cache=False)
    ensure(not find(docs, "Secret"), f"Secrets rendered although existing ones are named: {[d['metadata']['name'] for d in find(docs, 'Secret')]}")
    cl = one(docs, "SlurmCluster")
    ensure(cl["spec"]["auth"]["jwt"]["keySecretRef"] == {"name": "my-operator-jwt", "key": "key.bin"}, str(cl["spec"]["auth"]))
    sts = one(docs, "StatefulSet")
    srcs = [s["secret"] for v in sts["spec"]["template"]["spec"]["volumes"] for s in (v.get("projected") or {}).get("sources", [])]
    ensure({"name": "my-jwt", "items": [{"key": "key.bin", "path": "jwt_hs256.key"}]} in srcs, str(srcs))
    ensure({"name": "my-slurm-key", "items": [{"key": "slurm.key", "path": "slurm.key"}]} in srcs, str(srcs))
    return ""


def t_cluster_credentials() -> str:
    """Where the SlurmCluster's JWT key is for the operator: a labelled Secret in its credentials
    namespace (the chart's copy, the JWT key Secret itself, or an existing one)."""
    label = "slurm.rs/credentials"

    def case(sets: tuple[str, ...]) -> tuple[dict | None, dict[tuple[str, str], dict]]:
        docs = render(CLUSTER, sets=sets, cache=False)
        errs = check_cluster_wiring(docs)
        ensure(not errs, f"{sets}:\n  " + "\n  ".join(errs))
        cl = find(docs, "SlurmCluster")
        return (cl[0] if cl else None), {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in find(docs, "Secret")}

    def labelled(d: dict) -> bool:
        return (d["metadata"].get("labels") or {}).get(label) == "true"

    cl, sec = case(())
    ensure(cl["spec"]["auth"]["jwt"]["keySecretRef"]["name"] == "test-jwt-key", str(cl["spec"]["auth"]))
    copy, orig = sec.get(("slurm-operator", "test-jwt-key")), sec[(RELEASE_NS, "test-jwt-key")]
    ensure(copy is not None and labelled(copy), f"no labelled copy in slurm-operator: {sorted(sec)}")
    ensure(copy["data"] == orig["data"], "the copy holds another key")
    ensure(not labelled(orig), "the release namespace's key is labelled although the operator does not read there")
    ensure(cl["spec"]["allowInsecureHttp"] is True and "access" not in cl["spec"], str(cl["spec"]))

    cl, sec = case(("cluster.name=hpc", "operatorCredentialsNamespace=slurm-admin"))
    ensure(cl["spec"]["auth"]["jwt"]["keySecretRef"]["name"] == "hpc-jwt-key" and labelled(sec[("slurm-admin", "hpc-jwt-key")]),
           f"named after the SlurmCluster, in slurm-admin: {sorted(sec)}")

    cl, sec = case((f"operatorCredentialsNamespace={RELEASE_NS}",))
    ensure(all(ns == RELEASE_NS for ns, _ in sec), f"a copy although the credentials namespace is the release's: {sorted(sec)}")
    ensure(labelled(sec[(RELEASE_NS, "test-jwt-key")]) and cl["spec"]["auth"]["jwt"]["keySecretRef"]["name"] == "test-jwt-key",
           "same namespace: the JWT key Secret itself is not labelled and used")

    cl, sec = case(("cluster.credentials.existingSecret=ops-jwt",))
    ensure(all(ns == RELEASE_NS for ns, _ in sec) and not labelled(sec[(RELEASE_NS, "test-jwt-key")]), f"existing credentials: {sorted(sec)}")
    ensure(cl["spec"]["auth"]["jwt"]["keySecretRef"]["name"] == "ops-jwt", str(cl["spec"]["auth"]))

    cl, sec = case(("cluster.create=false",))
    ensure(cl is None and all(ns == RELEASE_NS and not labelled(d) for (ns, _), d in sec.items()), f"cluster.create=false: {sorted(sec)}")

    cl, _ = case(("accounting.enabled=true", "cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=alice",
                  "cluster.access[0].accounts={team-a}", "cluster.access[1].namespaceSelector.matchLabels.tier=batch",
                  "cluster.access[1].slurmUser=batch"))
    want = [{"namespaces": ["team-a"], "slurmUser": "alice", "accounts": ["team-a"]},
            {"namespaceSelector": {"matchLabels": {"tier": "batch"}}, "slurmUser": "batch"}]
    ensure(cl["spec"]["access"] == want, f"spec.access {cl['spec'].get('access')}")
    res = CRDS.validate(cl)
    ensure(not res.errors and not res.not_evaluated, f"{res.errors} {res.not_evaluated}")

    # The SlurmUser (the operator's own user) only on purpose, which the CRD accepts too.
    cl, _ = case(("cluster.access[0].namespaces={ops}", "cluster.access[0].slurmUser=slurm", "cluster.access[0].allowClusterUser=true"))
    ensure(cl["spec"]["access"] == [{"namespaces": ["ops"], "slurmUser": "slurm", "allowClusterUser": True}], f"spec.access {cl['spec'].get('access')}")
    res = CRDS.validate(cl)
    ensure(not res.errors and not res.not_evaluated, f"{res.errors} {res.not_evaluated}")
    # Without it the API server refuses the entry, as the chart does.
    cl["spec"]["access"][0].pop("allowClusterUser")
    res = CRDS.validate(cl)
    ensure(any("the cluster's own user" in str(e) for e in res.errors), f"the SlurmUser without allowClusterUser: {res.errors}")
    return "copy in slurm-operator (default), in another namespace, none in the release's, existing, none without a SlurmCluster; access, the SlurmUser only on purpose"


# --- values.schema.json and template failures -----------------------------------------------------

SCHEMA_CASES = [
    (OPERATOR, ("log.format=xml",), ["/log/format", "'text', 'json'"]),
    (OPERATOR, ("imagee.tag=1",), ["additional properties 'imagee' not allowed"]),
    (OPERATOR, ("metricsPort=0",), ["/metricsPort", "minimum"]),
    (OPERATOR, ("metricsPort=http",), ["/metricsPort", "want integer"]),
    (OPERATOR, ("watchNamespaces={hpc,Not_A_Namespace}",), ["/watchNamespaces/1"]),
    (OPERATOR, ("watchNamespace=hpc",), ["additional properties 'watchNamespace' not allowed"]),
    (OPERATOR, ("watchNamespaces=hpc",), ["/watchNamespaces", "want array"]),
    (OPERATOR, ("credentialsNamespace=Slurm_Admin",), ["/credentialsNamespace"]),
    (OPERATOR, ("allowedEndpoints={https://slurmrestd.example.org:6820/slurm}",), ["/allowedEndpoints/0"]),
    (OPERATOR, ("rbac.tenantRoles.aggregate=false",), ["additional properties 'aggregate' not allowed"]),
    (OPERATOR, ("rbac.adminRole.create=yes",), ["/rbac/adminRole/create", "want boolean"]),
    (OPERATOR, ("exampleCluster.slurmUser=Alice",), ["/exampleCluster/slurmUser"]),
    (OPERATOR, ("image.pullPolicy=Sometimes",), ["/image/pullPolicy"]),
    (OPERATOR, ("log.level=loud",), ["/log/level"]),
    (OPERATOR, ("exampleCluster.pollInterval=fast",), ["/exampleCluster/pollInterval"]),
    (OPERATOR, ("replicas=2",), ["replicas is 2 but leaderElection.enabled is false"]),
    # A PodDisruptionBudget that allows no eviction blocks every node drain.
    (OPERATOR, ("replicas=2", "leaderElection.enabled=true", "podDisruptionBudget.maxUnavailable=0%"),
     ["/podDisruptionBudget/maxUnavailable"]),
    (OPERATOR, ("serviceAccount.create=false",), ["serviceAccount.name must name an existing ServiceAccount"]),
    (OPERATOR, ("serviceMonitor.enabled=true", "service.enabled=false"), ["serviceMonitor.enabled needs service.enabled"]),
    (CLUSTER, ("nodesets.compute.replicas=-1",), ["/nodesets/compute/replicas", "minimum"]),
    (CLUSTER, ("nodesets.Compute_1.replicas=1",), ["Compute_1", "does not match pattern"]),
    (CLUSTER, ("nodesets.compute.gress=gpu:1",), ["additional properties 'gress' not allowed"]),
    (CLUSTER, ("nodesets.compute.gres=gpu:1 Weight=0",), ["/nodesets/compute/gres", "does not match pattern"]),
    (CLUSTER, ("clusterName=My-Cluster",), ["/clusterName"]),
    (CLUSTER, ("cluster.pollInterval=fast",), ["/cluster/pollInterval"]),
    (CLUSTER, ("operatorCredentialsNamespace=",), ["/operatorCredentialsNamespace"]),
    (CLUSTER, ("cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=Alice"), ["/cluster/access/0/slurmUser"]),
    (CLUSTER, ("cluster.access[0].slurmUser=alice",), ["/cluster/access/0"]),
    (CLUSTER, ("cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=alice", "cluster.access[1].namespaces={ops}",
               "cluster.access[1].slurmUser=slurm"), ["cluster.access[1].slurmUser is slurm.user (slurm)", "allowClusterUser=true"]),
    (CLUSTER, ("cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=root"),
     ["cluster.access[0].slurmUser cannot be root"]),
    (CLUSTER, ("cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=slurm", "cluster.access[0].allowClusterUser=yes"),
     ["/cluster/access/0/allowClusterUser", "want boolean"]),
    (CLUSTER, ("cluster.access[0].namespaces={Team_A}", "cluster.access[0].slurmUser=alice"), ["/cluster/access/0/namespaces/0"]),
    (CLUSTER, ("cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=alice", "cluster.access[0].account=x"),
     ["additional properties 'account' not allowed"]),
    # An entry's accounts and QoS bind a job's own script only where Slurm enforces them.
    (CLUSTER, ("cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=alice", "cluster.access[0].accounts={team-a}"),
     ["cluster.access[0].accounts:", "AccountingStorageEnforce=associations", "accounting.enabled=true"]),
    (CLUSTER, ("accounting.enabled=true", "slurm.config.AccountingStorageEnforce=", "cluster.access[0].namespaces={team-a}",
               "cluster.access[0].slurmUser=alice", "cluster.access[0].accounts={team-a}"), ["cluster.access[0].accounts:"]),
    (CLUSTER, ("accounting.enabled=true", "slurm.config.AccountingStorageEnforce=associations\\,limits",
               "cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=alice", "cluster.access[1].namespaces={team-b}",
               "cluster.access[1].slurmUser=bob", "cluster.access[1].qos={normal}"),
     ["cluster.access[1].qos:", "AccountingStorageEnforce=qos", "drop the entry's qos"]),
    # Nor may enforcement be weakened past that check: a later line, or a key in another case.
    (CLUSTER, ("slurm.extraConfig=AccountingStorageEnforce=none",), ["slurm.extraConfig sets AccountingStorageEnforce"]),
    (CLUSTER, ("accounting.enabled=true", "slurm.config.accountingstorageenforce=none"),
     ["slurm.config.accountingstorageenforce: write it AccountingStorageEnforce"]),
    (CLUSTER, ("secrets.jwtKey.existingSecret=my-jwt",), ["secrets.jwtKey.existingSecret is set", "cluster.credentials.existingSecret"]),
    # Also with the credentials namespace the release's: the chart cannot label that Secret.
    (CLUSTER, ("secrets.jwtKey.existingSecret=my-jwt", f"operatorCredentialsNamespace={RELEASE_NS}"),
     ["secrets.jwtKey.existingSecret is set", "labelled slurm.rs/credentials=true", "cluster.credentials.existingSecret"]),
    (CLUSTER, ("slurm.debug=loud",), ["/slurm/debug"]),
    (CLUSTER, ("slurmrestd.uid=0",), ["/slurmrestd/uid", "minimum"]),
    (CLUSTER, ("partitions.debug.state=OPEN",), ["/partitions/debug/state"]),
    (CLUSTER, ("slurm.extraConfigFiles.gres=x",), ["'gres' does not match pattern"]),
    (CLUSTER, ("nodesets.compute.partitions={nope}",), ['nodesets.compute.partitions names partition "nope"', "not in .Values.partitions (have: debug)"]),
    (CLUSTER, ("partitions.debug.nodesets={ghost}",), ['partitions.debug.nodesets names NodeSet "ghost"']),
    (CLUSTER, ("nodesets.gpu.replicas=1", "partitions.debug.nodesets={compute}"),
     ['partitions.debug.nodesets leaves out NodeSet "gpu"', "nodesets.gpu.partitions"]),
    (CLUSTER, ("partitions.other.default=true",), ["debug, other are all default: true"]),
    (CLUSTER, ("slurm.maxNodeCount=1",), ["ask for 2 nodes in all", "more than slurm.maxNodeCount (1)"]),
    (CLUSTER, ("nodesets.compute.autoscaling.enabled=true",), ["nodesets.compute.autoscaling.maxReplicas: set it"]),
    (CLUSTER, ("nodesets.compute.autoscaling.enabled=true", "nodesets.compute.autoscaling.maxReplicas=0"),
     ["/nodesets/compute/autoscaling/maxReplicas", "minimum"]),
    (CLUSTER, ("nodesets.compute.autoscaling.enabled=true", "nodesets.compute.autoscaling.maxReplicas=1025"),
     ["ask for 1025 nodes in all", "autoscaling.maxReplicas", "more than slurm.maxNodeCount (1024)"]),
    (CLUSTER, ("nodesetDefaults.autoscaling.enabled=true",), ["additional properties 'autoscaling' not allowed"]),
    (CLUSTER, ("nodesets.compute.realMemory=lots",), ["/nodesets/compute/realMemory", "'lots' does not match pattern"]),
    (CLUSTER, ("accounting.enabled=true", "accounting.mariadb.enabled=false"), ["set accounting.external.host and accounting.external.passwordSecret.name"]),
    (CLUSTER, ("sharedVolume.enabled=true", "sharedVolume.nfs.server=nfs.example"), ["sharedVolume.nfs.path is empty"]),
    (CLUSTER, ("networkPolicy.enabled=true",), ["networkPolicy.slurmrestdFrom empty", "kubernetes.io/metadata.name: <the namespace the operator runs in>"]),
    (CLUSTER, ("networkPolicy.enabled=true", "networkPolicy.slurmrestdFrom[0].podSelector.matchLabels.app=x",
               "slurmctld.metrics.enabled=true", "slurmctld.metrics.serviceMonitor.enabled=true"),
     ["slurmctld.metrics.serviceMonitor.enabled with networkPolicy.enabled and networkPolicy.metricsFrom empty"]),
    (CLUSTER, ("slurm.extraConfigFiles.slurm\\.conf=x",), ["slurm.extraConfigFiles has slurm.conf, which the chart writes"]),
    (OPERATOR, ("networkPolicy.enabled=true", "serviceMonitor.enabled=true"),
     ["serviceMonitor.enabled with networkPolicy.enabled and networkPolicy.metricsFrom empty"]),
    (CLUSTER, ("networkPolicy.slurmrestdFrom[0].podSelectr.matchLabels.app=x",), ["/networkPolicy/slurmrestdFrom/0", "'podSelectr' not allowed"]),
]


def t_schema_case(chart: Path, sets: tuple[str, ...], want: list[str]) -> Callable[[], str]:
    def run() -> str:
        err = render_fail(chart, sets)
        missing = [w for w in want if w not in err]
        ensure(not missing, f"error message lacks {missing}:\n{err.strip()}")
        lines = [ln.strip() for ln in err.strip().splitlines() if ln.strip() and "--debug" not in ln]
        return lines[-1][:120]
    return run


def template_with(chart: Path, values: dict | None = None, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """helm template with a values file written from `values` (real YAML types: a float stays a float)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["template", "test", str(chart), "--namespace", RELEASE_NS]
        if values is not None:
            vf = Path(tmp) / "values.yaml"
            vf.write_text(yaml.safe_dump(values))
            cmd += ["-f", str(vf)]
        return helm(*cmd, *args)


def schema_nodes(node: Any, path: str = "") -> list[tuple[str, dict]]:
    """Every (path, sub-schema) of a JSON schema, properties by name."""
    out: list[tuple[str, dict]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for k, v in node.items():
            if k == "properties" and isinstance(v, dict):
                for name, sub in v.items():
                    out += schema_nodes(sub, f"{path}/{name}")
            elif k in ("additionalProperties", "items", "propertyNames") and isinstance(v, dict):
                out += schema_nodes(v, f"{path}/<{k}>")
    return out


CLUSTER_IMAGE_TAGS = [("images", c, "tag") for c in ("slurmctld", "slurmd", "slurmrestd", "slurmdbd", "login", "mariadb")] + [
    ("nodesets", "compute", "image", "tag"), ("nodesetDefaults", "image", "tag")]


def t_cluster_image_tags_strings() -> str:
    """YAML `tag: 10.10` is the float 10.1: the chart must refuse a number, not render mariadb:10.1."""
    schema = json.loads((CLUSTER / "values.schema.json").read_text())
    loose = [p for p, s in schema_nodes(schema) if p.endswith("/tag") and s.get("type") != "string"]
    problems = [f"image tags that may be numbers in values.schema.json: {loose}"] if loose else []
    for path in CLUSTER_IMAGE_TAGS:
        values: dict = {}
        d = values
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = 10.10
        if path[0] == "nodesets":
            d["repository"] = "example.org/slurmd"
        p = template_with(CLUSTER, values, ("--set", "accounting.enabled=true", "--set", "login.enabled=true"))
        where = "/" + "/".join(path)
        if p.returncode == 0:
            images = sorted(set(re.findall(r'image: "?([^"\s]*:10\.1)"?$', p.stdout, re.M)))
            problems.append(f"{'.'.join(path)}: 10.10 (a YAML float) rendered: {images}")
        elif not (f"'{where}'" in p.stderr and "want string" in p.stderr):
            problems.append(f"{'.'.join(path)}: error does not name it:\n{p.stderr.strip()}")
    p = helm("template", "test", str(CLUSTER), "--set", "accounting.enabled=true", "--set-json", "images.mariadb.tag=10.10")
    if p.returncode == 0 or "'/images/mariadb/tag'" not in p.stderr:
        problems.append(f"--set-json images.mariadb.tag=10.10: {p.stderr.strip() or 'rendered ' + str(re.findall(r'image: (.*mariadb.*)', p.stdout))}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    p = template_with(CLUSTER, {"images": {"mariadb": {"tag": "10.10"}}}, ("--set", "accounting.enabled=true"))
    ensure(p.returncode == 0, p.stderr)
    ensure('image: "docker.io/library/mariadb:10.10"' in p.stdout, "tag \"10.10\" (quoted) is not rendered as written")
    render(CLUSTER)  # the defaults still validate
    return f"{len(CLUSTER_IMAGE_TAGS)} tags refuse 10.10 (a float), \"10.10\" renders mariadb:10.10"


def nodeset_crd_rules() -> dict[str, Any]:
    crd = next(c for c in load_crds() if c["spec"]["names"]["kind"] == "SlurmNodeSet")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    parts = spec["slurm"]["properties"]["partitions"]
    drain = spec["scaleIn"]["properties"]["drainTimeout"]
    (bound,) = [re.fullmatch(r"duration\(self\) <= duration\('(\d+)h'\)", r["rule"]).group(1)
                for r in drain["x-kubernetes-validations"]]
    return {"partition": parts["items"], "partitionsMaxItems": parts["maxItems"], "drain": drain, "drainMaxHours": int(bound)}


def crd_accepts_nodeset(edit: Callable[[dict], None]) -> bool:
    base = json.loads(json.dumps(one(render(CLUSTER), "SlurmNodeSet")))
    edit(base)
    res = CRDS.validate(base)
    ensure(not res.not_evaluated, f"CEL not evaluated: {res.not_evaluated}")
    return not res.errors


def t_cluster_schema_matches_nodeset_crd() -> str:
    """Partition names and scaleIn.drainTimeout: what the chart renders the API server takes."""
    crd = nodeset_crd_rules()
    schema = json.loads((CLUSTER / "values.schema.json").read_text())
    props = schema["properties"]
    want_name = {"pattern": crd["partition"]["pattern"]}
    if "maxLength" in crd["partition"]:
        want_name["maxLength"] = crd["partition"]["maxLength"]
    got = {
        "partitions (keys)": props["partitions"]["propertyNames"],
        "nodesets.*.partitions[]": props["nodesets"]["additionalProperties"]["properties"]["partitions"]["items"],
        "nodesetDefaults.partitions[]": props["nodesetDefaults"]["properties"]["partitions"]["items"],
    }
    off = [f"{k}: {({x: v.get(x) for x in ('pattern', 'maxLength')})} != CRD {want_name}" for k, v in got.items()
           if {x: v.get(x) for x in want_name} != want_name or ("maxLength" in v and "maxLength" not in want_name)]
    for k, owner in (("nodesets.*.partitions", props["nodesets"]["additionalProperties"]), ("nodesetDefaults.partitions", props["nodesetDefaults"])):
        if owner["properties"]["partitions"].get("maxItems") != crd["partitionsMaxItems"]:
            off.append(f"{k}: maxItems {owner['properties']['partitions'].get('maxItems')} != CRD {crd['partitionsMaxItems']}")
    for k, owner in (("nodesets.*.scaleIn.drainTimeout", props["nodesets"]["additionalProperties"]), ("nodesetDefaults.scaleIn.drainTimeout", props["nodesetDefaults"])):
        d = owner["properties"]["scaleIn"]["properties"]["drainTimeout"]
        for x in ("pattern", "maxLength"):
            if d.get(x) != crd["drain"].get(x):
                off.append(f"{k}: {x} {d.get(x)!r} != CRD {crd['drain'].get(x)!r}")
    problems = [f"values.schema.json differs from the SlurmNodeSet CRD: {o}" for o in off]

    # Partition names: the chart renders exactly those the CRD takes, and names the one it refuses.
    names = ["-x", "x-", ".x", "_x", "x.y", "Debug_2", "a" * 63, "a" * 64, "a b", "x/y", "0"]
    for name in names:
        crd_ok = crd_accepts_nodeset(lambda o, n=name: o["spec"]["slurm"].__setitem__("partitions", [n]))
        p = template_with(CLUSTER, {"partitions": {name: {}}, "nodesets": {"compute": {"partitions": [name]}}})
        if p.returncode == 0:
            docs = [d for d in yaml.safe_load_all(p.stdout) if d]
            res = CRDS.validate(one(docs, "SlurmNodeSet"))
            wiring = check_cluster_wiring(docs)
            if wiring:
                problems.append(f"partition {name!r}: slurm.conf and the SlurmNodeSet disagree: {wiring}")
            if res.errors:
                problems.append(f"partition {name!r}: rendered, the CRD refuses the SlurmNodeSet: {res.errors}")
            elif not crd_ok:
                problems.append(f"partition {name!r}: rendered, the CRD refuses it")
        elif crd_ok:
            problems.append(f"partition {name!r}: refused, the CRD takes it:\n{p.stderr.strip()}")
        elif f"'{name}'" not in p.stderr or "does not match pattern" not in p.stderr:
            problems.append(f"partition {name!r}: the error does not name it:\n{p.stderr.strip()}")
    # scaleIn.drainTimeout, around the CRD's bound (Go's time.ParseDuration, as CEL's duration()):
    # (value, API server takes it, crdschema's float seconds can tell).
    h = crd["drainMaxHours"]
    durations = [
        (f"{h}h", True, True), (f"{h}h1ns", False, False), (f"{h + 1}h", False, True),
        (f"{h - 1}h60m", True, True), (f"{h - 1}h59m59.999999999s", True, True), (f"{h - 1}h59m60.000000001s", False, False),
        (f"{h * 60}m", True, True), (f"{h * 60 + 1}m", False, True), (f"{h * 3600}s", True, True), (f"{h * 3600 + 1}s", False, True),
        ("0.5h", True, True), ("30s", True, True), ("99999999999h", False, True), ("1" * 62 + "ns", False, True),
        ("1h" * 33, False, True), ("1h" * 32, True, True), ("1d", False, True), ("-1h", False, True),
    ]
    for value, api_ok, exact in durations:
        crd_ok = crd_accepts_nodeset(lambda o, v=value: o["spec"].__setitem__("scaleIn", {"drainTimeout": v}))
        if exact and crd_ok != api_ok:
            problems.append(f"drainTimeout {value!r}: this table says {api_ok}, the CRD validator {crd_ok}: fix the table")
        for key, values in (("nodesets.compute.scaleIn.drainTimeout", {"nodesets": {"compute": {"scaleIn": {"drainTimeout": value}}}}),
                            ("nodesetDefaults.scaleIn.drainTimeout", {"nodesetDefaults": {"scaleIn": {"drainTimeout": value}}})):
            p = template_with(CLUSTER, values)
            if (p.returncode == 0) != api_ok:
                problems.append(f"{key}={value!r}: {'rendered' if p.returncode == 0 else 'refused'}; the API server "
                                f"{'takes' if api_ok else 'refuses'} it{': ' + p.stderr.strip() if p.returncode else ''}")
            elif p.returncode and not ("drainTimeout" in p.stderr):
                problems.append(f"{key}={value!r}: the error does not name drainTimeout:\n{p.stderr.strip()}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return f"{len(names)} partition names, {len(durations)} drainTimeouts (bound {h}h) as the CRD decides"


NODESET_LOOKUP = 'lookup "slurm.rs/v1alpha1" "SlurmNodeSet" $.Release.Namespace $ns.objectName'


def live_nodeset(owner: str, cluster: str, replicas: int | None = None) -> str:
    """A template expression for a live SlurmNodeSet of release OWNER joining CLUSTER, as lookup
    returns it (numbers as float64)."""
    spec = f'"clusterName" {json.dumps(cluster)}' + (f' "replicas" (float64 {replicas})' if replicas is not None else "")
    return ('(dict "metadata" (dict "name" $ns.objectName "annotations" (dict "meta.helm.sh/release-name" '
            f'{json.dumps(owner)} "meta.helm.sh/release-namespace" $.Release.Namespace)) "spec" (dict {spec}))')


def render_with_live_nodesets(fake: str, sets: tuple[str, ...], api: bool = True) -> subprocess.CompletedProcess:
    """`helm template` of slurm-cluster with each SlurmNodeSet's lookup replaced by FAKE, a template
    expression standing in for the live object (`live_nodeset`, or `(dict)`: none). `api`:
    whether the SlurmNodeSet kind is known (the chart looks up only then)."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "slurm-cluster"
        shutil.copytree(CLUSTER, chart)
        tpl = chart / "templates" / "slurmnodesets.yaml"
        text = tpl.read_text()
        ensure(text.count(NODESET_LOOKUP) == 1,
               f"templates/slurmnodesets.yaml does not look up each live SlurmNodeSet once ({NODESET_LOOKUP})")
        tpl.write_text(text.replace(NODESET_LOOKUP, fake))
        args = ["template", "test", str(chart), "--namespace", RELEASE_NS]
        if api:
            args += ["--api-versions", "slurm.rs/v1alpha1/SlurmNodeSet"]
        for s in sets:
            args += ["--set", s]
        return helm(*args)


def t_cluster_name_change_guard() -> str:
    """spec.clusterName of a SlurmNodeSet is immutable (CEL self == oldSelf): a helm upgrade that
    changes cluster.name must fail at render, naming the value, not half-way through the apply.
    The live SlurmNodeSet comes from lookup; offline, a fake one stands in for it."""
    crd = next(c for c in load_crds() if c["spec"]["names"]["kind"] == "SlurmNodeSet")
    rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["clusterName"].get("x-kubernetes-validations", [])
    ensure(any(r["rule"] == "self == oldSelf" for r in rules), "the CRD's clusterName is no longer immutable: this check is moot")
    problems = []
    def case(live: dict | None, sets: tuple[str, ...], api: bool = True) -> subprocess.CompletedProcess:
        fake = "(dict)" if live is None else live_nodeset(live["owner"], live["clusterName"])
        return render_with_live_nodesets(fake, sets, api)

    # Installed as the default (cluster.name = the release name, "test"), upgraded with another name.
    p = case({"owner": "test", "clusterName": "test"}, ("cluster.name=other",))
    if p.returncode == 0:
        new = {d["spec"]["clusterName"] for d in yaml.safe_load_all(p.stdout) if d and d.get("kind") == "SlurmNodeSet"}
        problems.append(f"cluster.name test -> other: rendered SlurmNodeSets with clusterName {sorted(new)}; the API server "
                        "refuses them (clusterName is immutable) after the ConfigMap and SlurmCluster were applied")
    else:
        want = ["cluster.name", '"test"', '"other"', "test-compute", "immutable", "delete"]
        missing = [w for w in want if w not in p.stderr]
        if missing:
            problems.append(f"the error lacks {missing}:\n{p.stderr.strip()}")
    p = case({"owner": "test", "clusterName": "old"}, ("cluster.create=false", "cluster.name=new"))
    if p.returncode == 0:
        problems.append("cluster.create=false, cluster.name old -> new: rendered")
    # Not refused: the same name; no live set (install, new set); another release's object
    # (Helm refuses to adopt it anyway); no CRD known (offline helm template, Argo CD).
    for live, sets, api, what in (({"owner": "test", "clusterName": "other"}, ("cluster.name=other",), True, "unchanged cluster.name"),
                                  ({"owner": "test", "clusterName": "test"}, (), True, "unchanged default"),
                                  (None, ("cluster.name=other",), True, "no live SlurmNodeSet"),
                                  ({"owner": "someone-else", "clusterName": "x"}, (), True, "another release's SlurmNodeSet"),
                                  ({"owner": "test", "clusterName": "x"}, (), False, "SlurmNodeSet kind unknown (offline)")):
        p = case(live, sets, api)
        if p.returncode != 0:
            problems.append(f"{what}: refused:\n{p.stderr.strip()}")
    readme = (CLUSTER / "README.md").read_text()
    up = re.search(r"^## Upgrades\n(.*?)(?=^## )", readme, re.S | re.M)
    if not up or not all(w in up.group(1) for w in ("cluster.name", "immutable", "delete slurmnodesets")):
        problems.append("README: no '## Upgrades' section saying cluster.name cannot change (immutable clusterName, delete slurmnodesets)")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "cluster.name change refused with the live SlurmNodeSet; unchanged, new, foreign or offline pass"


def t_autoscaled_nodeset_replicas() -> str:
    """nodesets.<name>.autoscaling.enabled: spec.replicas is an autoscaler's, so the chart never
    writes it, whatever the live set holds (a rendered count would come back with every upgrade,
    and with a rollback to the revision that stored it); a set not autoscaled renders the
    chart's replicas as before. NOTES.txt says which is which."""
    crd = next(c for c in load_crds() if c["spec"]["names"]["kind"] == "SlurmNodeSet")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    ensure("replicas" not in spec.get("required", []), "the CRD requires spec.replicas: an autoscaled set cannot leave it out")
    auto = ("nodesets.compute.autoscaling.enabled=true", "nodesets.compute.autoscaling.maxReplicas=8")
    problems = []
    for fake, sets, api, want, what in (
            ("(dict)", auto, True, None, "autoscaled, installed (nothing live)"),
            (live_nodeset("test", "test", 7), auto, True, None, "autoscaled, live at 7"),
            (live_nodeset("test", "test", 7), auto, False, None, "autoscaled, offline (kind unknown: no lookup)"),
            (live_nodeset("test", "test", 7), auto + ("nodesets.compute.replicas=3",), True, None, "autoscaled, replicas=3"),
            (live_nodeset("test", "test", 7), (), True, 2, "not autoscaled, live at 7 (the chart's 2)"),
            (live_nodeset("test", "test", 7), ("nodesets.compute.replicas=3",), True, 3, "not autoscaled, replicas=3")):
        p = render_with_live_nodesets(fake, sets, api)
        if p.returncode != 0:
            problems.append(f"{what}: refused:\n{p.stderr.strip()}")
            continue
        sets_rendered = [d for d in yaml.safe_load_all(p.stdout) if d and d.get("kind") == "SlurmNodeSet"]
        if len(sets_rendered) != 1:
            problems.append(f"{what}: {len(sets_rendered)} SlurmNodeSets rendered")
            continue
        rendered = sets_rendered[0]["spec"]
        if rendered.get("replicas") != want or (want is None and "replicas" in rendered):
            problems.append(f"{what}: spec.replicas {rendered.get('replicas')!r}, want {want!r}")
        res = CRDS.validate(sets_rendered[0])
        if res.errors:
            problems.append(f"{what}: the CRD refuses it: {res.errors}")
    # An autoscaled set's maxReplicas counts against MaxNodeCount, its replicas do not.
    p = helm("template", "test", str(CLUSTER), "--namespace", RELEASE_NS, "--set", ",".join(auto + ("nodesets.compute.replicas=5000",)))
    if p.returncode != 0:
        problems.append(f"autoscaled with replicas=5000 (not the chart's to write): refused:\n{p.stderr.strip()}")
    # NOTES.txt: the autoscaled set's maximum, not a replica count the object does not have.
    line = next((l for l in notes(CLUSTER, auto).splitlines() if "SlurmNodeSet test-compute:" in l), "")
    if "autoscaled (at most 8 nodes" not in line:
        problems.append(f"NOTES.txt for the autoscaled set: {line!r}")
    docs = (CLUSTER / "README.md").read_text() + (ROOT / "docs" / "autoscaling.md").read_text()
    if "autoscaling.enabled" not in docs or "autoscaling.maxReplicas" not in docs:
        problems.append("README/docs/autoscaling.md do not name nodesets.<name>.autoscaling.enabled/maxReplicas")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "an autoscaled set renders no replicas (new, live, offline); the chart's when not autoscaled; NOTES says so"


def t_nodeset_entry_over_defaults() -> str:
    """A set's own 0, false, "" and [] are its own: sprig's merge took them for unset and filled
    them from nodesetDefaults (replicas: 0 rendered 1, a parked GPU set kept a node)."""
    docs = [d for d in yaml.safe_load_all(template_with(CLUSTER, {
        "nodesetDefaults": {"features": ["fast"], "gres": "gpu:1", "terminationGracePeriodSeconds": 30},
        "nodesets": {"compute": {"replicas": 0, "terminationGracePeriodSeconds": 0, "features": [], "gres": ""},
                     "other": {"replicas": 1}},
    }).stdout) if d]
    ensure(docs, "the values did not render")
    sets = {d["metadata"]["name"]: d for d in find(docs, "SlurmNodeSet")}
    problems = []
    compute, other = sets["test-compute"], sets["test-other"]
    if compute["spec"].get("replicas") != 0:
        problems.append(f"compute: replicas {compute['spec'].get('replicas')!r}, want 0")
    grace = compute["spec"]["template"]["spec"].get("terminationGracePeriodSeconds")
    if grace != 0:
        problems.append(f"compute: terminationGracePeriodSeconds {grace!r}, want 0")
    if compute["spec"]["slurm"].get("features") != ["compute"] or compute["spec"]["slurm"].get("gres"):
        problems.append(f"compute: features/gres from the defaults: {compute['spec']['slurm']}")
    if other["spec"]["slurm"].get("features") != ["other", "fast"] or other["spec"]["slurm"].get("gres") != "gpu:1":
        problems.append(f"other: the defaults are lost: {other['spec']['slurm']}")
    if "Gres=" in slurmd_args(compute)["conf"] or "Gres=gpu:1" not in slurmd_args(other)["conf"]:
        problems.append(f"slurmd's --conf: compute {slurmd_args(compute)['conf']!r}, other {slurmd_args(other)['conf']!r}")
    text = notes(CLUSTER, ("nodesets.compute.replicas=0",))
    line = next((l for l in text.splitlines() if "SlurmNodeSet test-compute:" in l), "")
    if " 0 node" not in line:
        problems.append(f"NOTES.txt for replicas=0: {line!r}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "replicas 0, grace 0, features [] and gres \"\" kept over nodesetDefaults; other sets keep the defaults"


def t_nodeset_image_of_its_own() -> str:
    """A set's image: its own tag or digest names it (images.slurmd's digest does not win over
    its tag); its own repository alone takes the global tag, never the global digest."""
    digest = "sha256:" + "a" * 64
    mine = "sha256:" + "b" * 64
    g = "ghcr.io/slinkyproject/slurmd"
    tag = yaml.safe_load((CLUSTER / "values.yaml").read_text())["images"]["slurmd"]["tag"]
    problems = []
    for sets, want in (
            ((f"images.slurmd.digest={digest}", "nodesets.compute.image.repository=registry.example.org/x",
              "nodesets.compute.image.tag=25.11-cuda"), "registry.example.org/x:25.11-cuda"),
            ((f"images.slurmd.digest={digest}", "nodesets.compute.image.repository=registry.example.org/x"),
             f"registry.example.org/x:{tag}"),
            ((f"images.slurmd.digest={digest}", "nodesets.compute.image.tag=t2"), f"{g}:t2"),
            ((f"images.slurmd.digest={digest}", f"nodesets.compute.image.digest={mine}"), f"{g}@{mine}"),
            ((f"images.slurmd.digest={digest}",), f"{g}@{digest}"),
            ((f"images.slurmd.digest={digest}", f"nodesets.compute.image.repository={g}"), f"{g}@{digest}"),
            ((), f"{g}:{tag}")):
        ns = one(render(CLUSTER, sets=sets, cache=False), "SlurmNodeSet")
        pod = ns["spec"]["template"]["spec"]
        images = {c["name"]: c["image"] for c in pod["containers"] + pod.get("initContainers", [])}
        if set(images.values()) != {want}:
            problems.append(f"--set {','.join(sets) or '(none)'}: {images}, want {want}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "7 combinations of images.slurmd and a set's image"


def t_cluster_durations_as_the_crd_takes_them() -> str:
    """cluster.pollInterval and cluster.tokenLifetime render exactly when the SlurmCluster CRD's
    CEL rules take them: the API server refusing the SlurmCluster, applied after everything else,
    left a release half-applied."""
    base = one(render(CLUSTER), "SlurmCluster")
    problems = []
    cases = (("cluster.pollInterval", ("pollInterval",),
              ("100ms", "99ms", "99.999999ms", "5m", "5m1ns", "4m60s", "300s", "301s", "10m", "1h", "0s", "0.5s")),
             ("cluster.tokenLifetime", ("auth", "jwt", "lifetime"),
              ("30s", "29s", "29.999s", "15m", "15m1ns", "900s", "901s", "1h", "14m59s", "10m")))
    for key, path, values in cases:
        for value in values:
            obj = json.loads(json.dumps(base))
            at = obj["spec"]
            for k in path[:-1]:
                at = at[k]
            at[path[-1]] = value
            res = CRDS.validate(obj)
            ensure(not res.not_evaluated, f"CEL not evaluated: {res.not_evaluated}")
            crd_ok = not res.errors
            p = helm("template", "test", str(CLUSTER), "--namespace", RELEASE_NS, "--set", f"{key}={value}")
            if (p.returncode == 0) != crd_ok:
                problems.append(f"{key}={value}: {'rendered' if p.returncode == 0 else 'refused'}, the CRD "
                                f"{'takes' if crd_ok else 'refuses'} it{': ' + p.stderr.strip() if p.returncode else ''}")
            elif p.returncode and key not in p.stderr:
                problems.append(f"{key}={value}: the error does not name it:\n{p.stderr.strip()}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return f"{sum(len(c[2]) for c in cases)} durations as the CRD decides"


def t_large_numbers_written_whole() -> str:
    """A number of a million or more from a values file (Helm reads it as a float64, which
    toString writes 1e+06) reaches slurm.conf, cgroup.conf, slurmdbd.conf and a partition's line
    written whole: slurmctld refuses 1e+06 and would not start. A fraction stays one."""
    values = {
        "slurm": {"config": {"MaxJobCount": 1000000, "MaxArraySize": 1000001, "SchedulerTimeSlice": 30.5},
                  "maxNodeCount": 1000000,
                  "cgroup": {"enabled": True, "config": {"MaxRAMPercent": 98.5, "MinRAMSpace": 2000000}}},
        "partitions": {"debug": {"options": {"MaxMemPerNode": 1048576}}},
        "accounting": {"enabled": True, "slurmdbd": {"config": {"MaxQueryTimeRange": 3000000}}},
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(values, f)
    try:
        docs = render(CLUSTER, values=(f.name,), cache=False)
    finally:
        os.unlink(f.name)
    conf = slurm_conf(docs)
    cm = next(d for d in find(docs, "ConfigMap") if "slurm.conf" in d.get("data", {}))
    cgroup = cm["data"].get("cgroup.conf", "")
    dbd = "".join(c["data"]["slurmdbd.conf"] for c in find(docs, "ConfigMap") if "slurmdbd.conf" in c.get("data", {}))
    problems = []
    for key, want in (("MaxJobCount", "1000000"), ("MaxArraySize", "1000001"), ("SchedulerTimeSlice", "30.5"),
                      ("MaxNodeCount", "1000000")):
        if conf.get(key) != want:
            problems.append(f"slurm.conf {key}={conf.get(key)!r}, want {want}")
    if conf["PartitionName"]["debug"].get("MaxMemPerNode") != "1048576":
        problems.append(f"partition debug: {conf['PartitionName']['debug']}")
    for text, line in ((cgroup, "MinRAMSpace=2000000"), (cgroup, "MaxRAMPercent=98.5"), (dbd, "MaxQueryTimeRange=3000000")):
        if line not in text.splitlines():
            problems.append(f"{line!r} not in:\n{text}")
    for name, text in (("slurm.conf", conf["_text"]), ("cgroup.conf", cgroup), ("slurmdbd.conf", dbd)):
        if re.search(r"\de\+\d", text):
            problems.append(f"{name} has a number in exponent form:\n{text}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "a million and more written whole in slurm.conf, cgroup.conf, slurmdbd.conf and a partition line"


def t_empty_namespace_selector_refused() -> str:
    """An access entry's namespaceSelector that names no label (which would grant every
    namespace) is refused by the chart's schema, naming it: otherwise the chart applies the
    Secrets, the configuration and the StatefulSets, and then the API server refuses the
    SlurmCluster (the CRD's rule), leaving a failed, half-applied release."""
    problems = []
    for selector in ({}, {"matchLabels": {}}, {"matchExpressions": []}, {"matchLabels": {}, "matchExpressions": []}):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump({"cluster": {"access": [{"namespaceSelector": selector, "slurmUser": "alice"}]}}, f)
        try:
            p = helm("template", "test", str(CLUSTER), "--namespace", RELEASE_NS, "-f", f.name)
        finally:
            os.unlink(f.name)
        if p.returncode == 0 or "/cluster/access/0/namespaceSelector" not in p.stderr:
            problems.append(f"{selector}: {'rendered' if p.returncode == 0 else p.stderr.strip()}")
    # One label, or one expression, is a selector.
    for sets in (("cluster.access[0].namespaceSelector.matchLabels.tier=batch",),
                 ("cluster.access[0].namespaceSelector.matchExpressions[0].key=tier",
                  "cluster.access[0].namespaceSelector.matchExpressions[0].operator=Exists")):
        render(CLUSTER, sets=sets + ("cluster.access[0].slurmUser=alice",), cache=False)
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "4 empty selectors refused, naming the field; a label or an expression renders"


def t_other_namespaces_nodesets_join_partitions() -> str:
    """With cluster.nodeSetNamespaces, a SlurmNodeSet of another namespace can join the chart's
    partitions: slurm.conf selects, per partition (not allNodes), the nodes with the feature
    partition-<name> the operator gives them, in a NodeSet of that name; without, nothing of the
    kind is written (the smoke test runs the first on a real slurmctld)."""
    problems = []
    conf = slurm_conf(render(CLUSTER, sets=("cluster.nodeSetNamespaces={team-gpu}", "partitions.all.allNodes=true"),
                             cache=False))
    want = {"NodeSet": "partition-debug", "Feature": "partition-debug"}
    if conf["NodeSet"].get("partition-debug") != want:
        problems.append(f"NodeSet partition-debug: {conf['NodeSet'].get('partition-debug')}")
    if "partition-debug" not in conf["PartitionName"]["debug"].get("Nodes", "").split(","):
        problems.append(f"partition debug: {conf['PartitionName']['debug']}")
    if "partition-all" in conf["NodeSet"] or conf["PartitionName"]["all"].get("Nodes") != "ALL":
        problems.append(f"allNodes partition: {conf['PartitionName']['all']}, NodeSets {sorted(conf['NodeSet'])}")
    plain = slurm_conf(render(CLUSTER, cache=False))
    if any(n.startswith("partition-") for n in plain["NodeSet"]):
        problems.append(f"without nodeSetNamespaces: NodeSets {sorted(plain['NodeSet'])}")
    # Only the release namespace listed is no other namespace.
    own = slurm_conf(render(CLUSTER, sets=(f"cluster.nodeSetNamespaces={{{RELEASE_NS}}}",), cache=False))
    if any(n.startswith("partition-") for n in own["NodeSet"]):
        problems.append(f"nodeSetNamespaces of the release namespace only: NodeSets {sorted(own['NodeSet'])}")
    err = render_fail(CLUSTER, ("cluster.nodeSetNamespaces={team-gpu}", "nodesets.partition-debug.replicas=1"))
    if "nodesets.partition-debug" not in err:
        problems.append(f"a chart set named partition-debug: {err.strip()}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "NodeSet=partition-<p> Feature=partition-<p> in each partition's Nodes; none without other namespaces"


def t_release_names_kept() -> str:
    """An upgrade that changes fullnameOverride or nameOverride fails at render, naming both,
    while the release's slurmctld StatefulSet (found by its instance and component labels) has
    the old name or name label: new names would start an empty cluster with new keys beside the
    running one. The pure helper is given a fake live StatefulSetList."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "slurm-cluster"
        shutil.copytree(CLUSTER, chart)
        lookup = 'lookup "apps/v1" "StatefulSet" .Release.Namespace ""'
        helpers = chart / "templates" / "_helpers.tpl"
        text = helpers.read_text()
        ensure(text.count(lookup) == 1, f"_helpers.tpl does not look up the release's StatefulSets once ({lookup})")
        def case(name: str, label: str, instance: str, sets: tuple[str, ...],
                 beside: str | None = None) -> subprocess.CompletedProcess:
            item = ('(dict "metadata" (dict "name" "%s" "labels" (dict "app.kubernetes.io/instance" "%s" '
                    '"app.kubernetes.io/component" "slurmctld" "app.kubernetes.io/name" "%s")))')
            items = item % (name, instance, label)
            if beside:
                items += " " + item % (beside, instance, label)
            live = f'(dict "items" (list {items}))'
            helpers.write_text(text.replace(lookup, live))
            args = ["template", "test", str(chart), "--namespace", RELEASE_NS]
            for s in sets:
                args += ["--set", s]
            return helm(*args)
        problems = []
        for sets, what in ((("fullnameOverride=renamed",), "fullnameOverride"), (("nameOverride=slurm",), "nameOverride")):
            p = case("test-slurmctld", "slurm-cluster", "test", sets)
            if p.returncode == 0 or "test-slurmctld" not in p.stderr or "fullnameOverride or nameOverride changed" not in p.stderr:
                problems.append(f"{what} changed: {p.stderr.strip() or 'rendered'}")
        # Two instances of the chart in one release (an umbrella chart's aliases): each finds
        # its own slurmctld beside the other's.
        p = case("test-slurmctld", "slurm-cluster", "test", (), beside="second-slurmctld")
        if p.returncode != 0:
            problems.append(f"beside another instance of the chart in the release: refused: {p.stderr.strip()}")
        # Unchanged, another release's StatefulSet, or nothing live: renders.
        for name, label, instance, sets, what in (("test-slurmctld", "slurm-cluster", "test", (), "unchanged"),
                                                  ("renamed-slurmctld", "slurm-cluster", "test", ("fullnameOverride=renamed",), "kept override"),
                                                  ("other-slurmctld", "slurm-cluster", "other", (), "another release's")):
            p = case(name, label, instance, sets)
            if p.returncode != 0:
                problems.append(f"{what}: refused: {p.stderr.strip()}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "renamed by fullnameOverride or nameOverride: refused, naming both; unchanged: rendered"


def t_partition_options_replace() -> str:
    """partitions.<p>.options: a key replaces the chart's key of that name (slurm.conf keys are
    case-insensitive), "" removes it (it rendered `State=`), and the keys the chart derives
    (PartitionName, Nodes) are refused, naming the option."""
    def line(*sets: str) -> str:
        text = slurm_conf(render(CLUSTER, sets=sets, cache=False))["_text"]
        return next(l for l in text.splitlines() if l.startswith("PartitionName=debug"))
    problems = []
    for sets, want in ((("partitions.debug.options.State=",), "PartitionName=debug Nodes=compute Default=YES MaxTime=INFINITE"),
                       (("partitions.debug.options.state=DOWN",), "PartitionName=debug Nodes=compute Default=YES MaxTime=INFINITE state=DOWN"),
                       (("partitions.debug.options.MaxTime=1:00:00", "partitions.debug.options.OverSubscribe=YES"),
                        "PartitionName=debug Nodes=compute Default=YES State=UP MaxTime=1:00:00 OverSubscribe=YES"),
                       ((), "PartitionName=debug Nodes=compute Default=YES MaxTime=INFINITE State=UP")):
        got = line(*sets)
        if got != want:
            problems.append(f"--set {','.join(sets) or '(none)'}: {got!r}, want {want!r}")
        keys = [w.split("=", 1)[0].lower() for w in got.split()]
        if len(keys) != len(set(keys)) or re.search(r"\w=(\s|$)", got):
            problems.append(f"--set {','.join(sets)}: a key twice or empty: {got!r}")
    for key in ("Nodes", "partitionName"):
        err = render_fail(CLUSTER, (f"partitions.debug.options.{key}=x",))
        if f"partitions.debug.options.{key}" not in err:
            problems.append(f"options.{key}: the error does not name it: {err.strip()}")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "replaced, removed, added; Nodes and PartitionName refused"


def t_notes_metrics_service() -> str:
    """NOTES' metrics hint names the metrics Service as rendered (truncated for a long
    fullnameOverride) and does not chain curl after a port-forward that never returns."""
    problems = []
    for sets in ((), ("fullnameOverride=" + "a" * 60,)):
        svc = next(d for d in find(render(OPERATOR, sets=sets, cache=False), "Service")
                   if d["metadata"]["name"].endswith("-metrics"))["metadata"]["name"]
        text = notes(OPERATOR, sets)
        if f"port-forward service/{svc} " not in text:
            problems.append(f"--set {','.join(sets) or '(none)'}: NOTES does not name service/{svc}")
        if re.search(r"port-forward[^\n]*&&", text):
            problems.append(f"--set {','.join(sets) or '(none)'}: curl chained after port-forward")
    ensure(not problems, "\n  " + "\n  ".join(problems))
    return "service named as rendered, curl on a line of its own"


# --- NOTES.txt ----------------------------------------------------------------------------------

def notes(chart: Path, sets: tuple[str, ...] = (), namespace: str = RELEASE_NS) -> str:
    args = ["install", "test", str(chart), "--dry-run=client", "--namespace", namespace]
    for s in sets:
        args += ["--set", s]
    p = helm(*args)
    ensure(p.returncode == 0, p.stderr)
    ensure("NOTES:" in p.stdout, "no NOTES")
    return p.stdout.split("NOTES:", 1)[1]


def yaml_blocks(text: str) -> list[dict]:
    return [yaml.safe_load(textwrap.dedent(b)) for b in re.findall(r"<<'YAML'\n(.*?)\n\s*YAML\n", text, re.S)]


def t_notes_operator() -> str:
    out = []
    for sets, creds, tenant in (((), RELEASE_NS, "team-a"),
                                (("watchNamespaces={hpc,lab}", "credentialsNamespace=slurm-admin"), "slurm-admin", "hpc"),
                                (("exampleCluster.endpoint=http://slurmrestd.slurm.svc:6820",), RELEASE_NS, "team-a")):
        text = notes(OPERATOR, sets)
        for needed in (f"-n {creds} create secret generic", "--from-file=jwt_hs256.key=",
                       f"-n {creds} label secret", "slurm.rs/credentials=true", "kind: SlurmCluster",
                       "rollout status", f"-n {tenant} create rolebinding", "--clusterrole=edit", "NoAccess",
                       "--clusterrole=test-slurm-operator-admin"):
            ensure(needed in text, f"NOTES ({sets}) lack {needed!r}")
        blocks = yaml_blocks(text)
        ensure([b["kind"] for b in blocks] == ["SlurmCluster", "SlurmJob"], f"expected a SlurmCluster and a SlurmJob in NOTES, got {blocks}")
        cluster, job = blocks
        for b in blocks:
            res = CRDS.validate(b)
            ensure(not res.errors and not res.not_evaluated, f"the NOTES {b['kind']} is invalid: {res.errors} {res.not_evaluated}")
        ensure("namespace" not in cluster["metadata"], "the NOTES SlurmCluster has a namespace: it is cluster-scoped")
        secret = re.search(r"create secret generic (\S+)", text).group(1)
        ensure(cluster["spec"]["auth"]["jwt"]["keySecretRef"]["name"] == secret, "NOTES SlurmCluster names another Secret")
        ensure(cluster["spec"]["access"][0]["namespaces"] == [tenant], f"NOTES SlurmCluster grants {cluster['spec']['access']}, want {tenant}")
        ensure(job["spec"]["clusterName"] == cluster["metadata"]["name"], "NOTES SlurmJob names another SlurmCluster")
        ensure(f"kubectl -n {tenant} apply -f - <<'YAML'" in text, f"the NOTES SlurmJob is not applied in {tenant}")
        out.append(f"tenant {tenant}, credentials in {creds}" + (", allowInsecureHttp" if cluster["spec"].get("allowInsecureHttp") else ""))
    text = notes(OPERATOR, ("rbac.tenantRoles.aggregateToEdit=false",))
    ensure("--clusterrole=test-slurm-operator-tenant-edit" in text, "without aggregation NOTES must bind tenant-edit itself")
    return "; ".join(out)


def t_notes_cluster() -> str:
    sets = ("login.enabled=true", "cluster.access[0].namespaces={team-a}", "cluster.access[0].slurmUser=alice")
    text = notes(CLUSTER, sets)
    blocks = yaml_blocks(text)
    ensure(len(blocks) == 1 and blocks[0]["kind"] == "SlurmJob", f"expected one SlurmJob in NOTES, got {blocks}")
    res = CRDS.validate(blocks[0])
    ensure(not res.errors and not res.not_evaluated, f"the NOTES SlurmJob is invalid: {res.errors} {res.not_evaluated}")
    cluster = one(render(CLUSTER), "SlurmCluster")["metadata"]["name"]
    ensure(blocks[0]["spec"]["clusterName"] == cluster, "NOTES SlurmJob names another SlurmCluster")
    ensure("kubectl -n team-a apply" in text, "the NOTES SlurmJob is not applied in the namespace access grants")
    ensure("exec -it deploy/test-login" in text, "no login hint")
    ensure("slurm-operator (its credentialsNamespace)" in text.replace("\n", " "), "no word on the credentials namespace")
    # Without access: the values NOTES suggest render, with accounting (accounts) and without.
    for sets in ((), ("accounting.enabled=true",)):
        text = notes(CLUSTER, sets)
        ensure(not yaml_blocks(text) and "cluster.access is empty" in text and "NoAccess" in text,
               "without access NOTES must say that no namespace may submit")
        suggested = re.search(r"with values\n\n(.*?)\n\nand helm upgrade", text, re.S)
        ensure(suggested is not None, f"{sets}: NOTES suggest no values for cluster.access")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "notes-values.yaml")
            Path(path).write_text(textwrap.dedent(suggested.group(1)))
            cluster = one(render(CLUSTER, (path,), sets, cache=False), "SlurmCluster")
            ensure(cluster["spec"]["access"], f"{sets}: the suggested values grant nothing")
            access = yaml.safe_load(Path(path).read_text())["cluster"]["access"]
            ensure(bool(access[0].get("accounts")) == bool(sets), f"{sets}: NOTES suggest {access}")
    return ""


# --- examples/ and the manifests in the READMEs ---------------------------------------------------

EXAMPLES = ROOT / "examples"
TENANCY = EXAMPLES / "tenancy"
DOCS_WITH_MANIFESTS = [ROOT / "README.md", OPERATOR / "README.md", CLUSTER / "README.md", TENANCY / "README.md"]


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def load_manifests(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


CRD_SCOPES = {(f"{c['spec']['group']}/{v['name']}", c["spec"]["names"]["kind"]): c["spec"]["scope"]
              for c in load_crds() for v in c["spec"]["versions"]}


def manifest_errors(docs: list[dict]) -> list[str]:
    """Every object valid (our kinds: schema, every CEL rule evaluated, scope; built-in kinds:
    Kubernetes' schemas, strict)."""
    errors = []
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d:
            errors.append(f"not a Kubernetes object: {str(d)[:80]}")
            continue
        for version in K8S_VERSIONS:
            errors += validate_object(d, version)
        scope = CRD_SCOPES.get((d.get("apiVersion"), d.get("kind")))
        if scope == "Cluster" and "namespace" in (d.get("metadata") or {}):
            errors.append(f"{d['kind']}/{d['metadata'].get('name')}: has a namespace, but the kind is cluster-scoped")
    return sorted(set(errors))


def t_example_valid(path: Path) -> Callable[[], str]:
    def run() -> str:
        docs = load_manifests(path)
        ensure(docs, "no objects")
        errors = manifest_errors(docs)
        ensure(not errors, "\n  " + "\n  ".join(errors))
        return ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    return run


def readme_manifests(path: Path) -> list[dict]:
    """The manifests a README shows: heredocs (<<'YAML' ... YAML) and ```yaml blocks that hold an
    object with apiVersion and kind (values snippets are not manifests)."""
    text = path.read_text()
    blocks = re.findall(r"<<'YAML'\n(.*?)\n\s*YAML\n", text, re.S) + re.findall(r"```ya?ml\n(.*?)```", text, re.S)
    out = []
    for b in blocks:
        for d in yaml.safe_load_all(textwrap.dedent(b)):
            if isinstance(d, dict) and "apiVersion" in d and "kind" in d:
                out.append(d)
    return out


def t_readme_manifests() -> str:
    errors, counts = [], []
    for path in DOCS_WITH_MANIFESTS:
        docs = readme_manifests(path)
        counts.append(f"{os.path.relpath(path, ROOT)}: {len(docs)}")
        errors += [f"{os.path.relpath(path, ROOT)}: {e}" for e in manifest_errors(docs)]
        text = path.read_text()
        for old in (r"\bkind: Cluster\b", r"\bkind: NodeSet\b", r"\bclusterRef:", r"\bwatchNamespace\b(?!s)",
                    r"\bclusters\.slurm\.rs\b", r"\bnodesets\.slurm\.rs\b"):
            for m in re.finditer(old, text):
                errors.append(f"{os.path.relpath(path, ROOT)}:{text[:m.start()].count(chr(10)) + 1}: the old API: {m.group(0)!r}")
    ensure(not errors, "\n  " + "\n  ".join(errors))
    return "; ".join(counts)


def tenancy_objects() -> dict[str, list[dict]]:
    files = sorted(p.name for p in TENANCY.glob("*.yaml"))
    want = ["00-credentials-secret.yaml", "10-slurmcluster.yaml", "20-namespaces.yaml", "30-tenant-rolebinding.yaml", "40-tenant-slurmjob.yaml"]
    ensure(files == want, f"examples/tenancy has {files}, want {want}")
    return {name: load_manifests(TENANCY / name) for name in files}


def access_entry(cluster: dict, namespace: str, labels: dict[str, str]) -> dict | None:
    """The first spec.access entry granting `namespace` (as the operator picks it)."""
    def selects(sel: dict | None) -> bool:
        if not sel:
            return False
        if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
            return False
        for e in sel.get("matchExpressions") or []:
            has, val = e["key"] in labels, labels.get(e["key"])
            ok = {"In": has and val in e.get("values", []), "NotIn": not has or val not in e.get("values", []),
                  "Exists": has, "DoesNotExist": not has}[e["operator"]]
            if not ok:
                return False
        return True
    return next((a for a in cluster["spec"].get("access") or []
                 if namespace in (a.get("namespaces") or []) or selects(a.get("namespaceSelector"))), None)


def t_example_tenancy() -> str:
    """The tenancy example agrees with itself: the key Secret is where the operator reads it and
    labelled, the SlurmCluster grants the namespaces that exist, the tenant's SlurmJob names the
    SlurmCluster and asks for what its namespace is granted."""
    objs = tenancy_objects()
    by = lambda kind: [d for docs in objs.values() for d in docs if d["kind"] == kind]  # noqa: E731
    (secret,), (cluster,), (job,) = objs["00-credentials-secret.yaml"], objs["10-slurmcluster.yaml"], objs["40-tenant-slurmjob.yaml"]
    ensure(secret["kind"] == "Secret" and cluster["kind"] == "SlurmCluster" and job["kind"] == "SlurmJob", "the files hold other kinds")
    ref = cluster["spec"]["auth"]["jwt"]["keySecretRef"]
    ensure(secret["metadata"]["namespace"] == "slurm-operator", "the key Secret is not in the credentials namespace slurm-operator")
    ensure(secret["metadata"]["name"] == ref["name"] and ref.get("key", "jwt_hs256.key") in secret["data"],
           f"SlurmCluster keySecretRef {ref} does not name the Secret's key")
    ensure(secret["metadata"].get("labels", {}).get("slurm.rs/credentials") == "true", "the key Secret is not labelled slurm.rs/credentials=true")
    base64.b64decode(secret["data"][ref.get("key", "jwt_hs256.key")], validate=True)
    ensure(cluster["metadata"]["name"] == "main", "the SlurmCluster is not main")
    grants = {ns: (a["slurmUser"], a.get("accounts")) for a in cluster["spec"]["access"] for ns in a.get("namespaces") or []}
    ensure(grants == {"team-a": ("alice", ["team-a"]), "team-b": ("bob", ["team-b"])}, f"access {grants}")
    namespaces = {d["metadata"]["name"] for d in by("Namespace")}
    ensure(namespaces == {"team-a", "team-b"}, f"namespaces {namespaces}")
    sa = one(by("ServiceAccount"), "ServiceAccount", "researcher")
    rb = one(by("RoleBinding"), "RoleBinding")
    ensure(sa["metadata"]["namespace"] == "team-a" and rb["metadata"]["namespace"] == "team-a", "researcher/RoleBinding not in team-a")
    ensure(rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}, f"roleRef {rb['roleRef']}")
    ensure(rb["subjects"] == [{"kind": "ServiceAccount", "name": "researcher", "namespace": "team-a"}], f"subjects {rb['subjects']}")
    ns = job["metadata"]["namespace"]
    ensure(ns == "team-a" and job["spec"]["clusterName"] == cluster["metadata"]["name"], "the SlurmJob is not team-a's on main")
    entry = access_entry(cluster, ns, {})
    ensure(entry is not None, f"no access entry grants {ns}: the SlurmJob would be refused (NoAccess)")
    ensure(not entry.get("accounts") or job["spec"].get("account", entry["accounts"][0]) in entry["accounts"],
           f"the SlurmJob asks for account {job['spec'].get('account')}, {ns} is granted {entry.get('accounts')}")
    return f"{ns} runs as {entry['slurmUser']} on {cluster['metadata']['name']}"


# The built-in roles the example binds, and which chart ClusterRoles aggregate into each.
BUILTIN_AGGREGATION = {"edit": "rbac.authorization.k8s.io/aggregate-to-edit",
                       "admin": "rbac.authorization.k8s.io/aggregate-to-admin",
                       "view": "rbac.authorization.k8s.io/aggregate-to-view"}


def can_i(subject: dict, verb: str, resource: str, namespace: str | None, bindings: list[dict], roles: list[dict]) -> bool:
    """kubectl auth can-i for the slurm.rs resources and for anything in a namespace where the
    subject has no binding at all (built-in roles are modelled only by what the chart aggregates
    into them)."""
    group = "slurm.rs" if resource.split("/")[0].startswith("slurm") else ""
    for b in bindings:
        if subject not in [{k: s.get(k) for k in ("kind", "name", "namespace")} for s in b.get("subjects") or []]:
            continue
        if b["kind"] == "RoleBinding" and b["metadata"]["namespace"] != namespace:
            continue  # a RoleBinding grants in its own namespace only (never cluster-scoped objects)
        name = b["roleRef"]["name"]
        if name in BUILTIN_AGGREGATION:
            if group != "slurm.rs":
                raise Failed(f"cannot tell what built-in {name} grants on {resource}")
            rules = [r for d in roles if (d["metadata"].get("labels") or {}).get(BUILTIN_AGGREGATION[name]) == "true" for r in d["rules"]]
        else:
            rules = [r for d in roles if d["metadata"]["name"] == name for r in d["rules"]]
        if any(group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", []) for r in rules):
            return True
    return False


def t_example_tenancy_rbac() -> str:
    """The README's `kubectl auth can-i` table holds, with the operator chart installed as the
    README installs it (release slurm-operator in namespace slurm-operator)."""
    objs = tenancy_objects()
    bindings = [d for docs in objs.values() for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    chart = render(OPERATOR, release="slurm-operator", namespace="slurm-operator", cache=False)
    bindings += find(chart, "RoleBinding") + find(chart, "ClusterRoleBinding")
    roles = find(chart, "ClusterRole") + find(chart, "Role")
    text = (TENANCY / "README.md").read_text()
    rows = re.findall(r"^\| (`[^|]*`) \| (yes|no) \|", text, re.M)
    ensure(len(rows) >= 6, f"found {len(rows)} rows of the can-i table in examples/tenancy/README.md")
    asked = []
    for cells, answer in rows:
        for cmd in re.findall(r"`([^`]+)`", cells):
            m = re.fullmatch(r"(\w+) ([a-z/]+)(?: -n ([a-z0-9-]+))?", cmd)
            ensure(m is not None, f"cannot read the can-i row {cmd!r}")
            verb, resource, ns = m.groups()
            m2 = re.search(r"--as=system:serviceaccount:([a-z0-9-]+):([a-z0-9-]+)", text)
            subject = {"kind": "ServiceAccount", "name": m2.group(2), "namespace": m2.group(1)}
            scoped = resource.split("/")[0] not in ("slurmclusters", "namespaces")
            ensure(scoped == (ns is not None), f"{cmd}: a namespace for a cluster-scoped resource, or none for a namespaced one")
            got = can_i(subject, verb, resource, ns, bindings, roles)
            ensure(got == (answer == "yes"), f"README says `can-i {cmd}` is {answer}; the chart's roles and the example's bindings say {'yes' if got else 'no'}")
            asked.append(f"{cmd}: {answer}")
    for needed in ("create slurmjobs -n team-a", "create slurmjobs -n team-b", "create slurmclusters", "get secrets -n slurm-operator"):
        ensure(any(a.startswith(needed + ":") for a in asked), f"the can-i table lacks {needed}")
    return f"{len(asked)} answers hold"


def t_example_tenancy_readme() -> str:
    """The README names every file and who applies it, and quotes the operator's NoAccess message
    as the code writes it."""
    text = (TENANCY / "README.md").read_text()
    for name in tenancy_objects():
        ensure(f"`{name}`" in text, f"README does not mention {name}")
    for word in ("platform admin", "tenant", "NoAccess", "slurm.rs/credentials"):
        ensure(word in text, f"README does not say {word!r}")
    src = (ROOT / "src" / "controller" / "slurmjob" / "access.rs").read_text()
    m = re.search(r'reason: "NoAccess",\s*message: format!\(\s*"((?:[^"\\]|\\.)*)"', src, re.S)
    ensure(m is not None, "cannot find the NoAccess message in src/controller/slurmjob/access.rs")
    message = re.sub(r"\\\n\s*", "", m.group(1)).replace("{namespace:?}", '"team-c"').replace("{cluster_name:?}", '"main"')
    ensure(message in text, f"README does not quote the NoAccess message as the operator writes it:\n    {message}")
    return ""


# --- real Slurm ---------------------------------------------------------------------------------

SMOKE_SETS = ("nodesets.compute.replicas=1", "nodesets.fast.replicas=1", "nodesets.fast.features={ssd}",
              "nodesets.fast.weight=5", "nodesets.fast.partitions={debug,fast}", "partitions.fast.maxTime=60",
              "nodesets.fast.resources.limits.memory=512Mi", "nodesets.fast.resources.limits.cpu=1",
              # slurm.conf's NodeSets by partition feature, for other namespaces' sets.
              "cluster.nodeSetNamespaces={team-gpu}")


def t_slurm_smoke() -> str:
    import slurm_smoke

    def fail(msg: str) -> None:
        raise Failed(msg)
    return slurm_smoke.run(render(CLUSTER, sets=SMOKE_SETS, cache=False), fail)


# --- e2e (a real cluster, when KUBECONFIG is set) -------------------------------------------------

def t_e2e_operator_ready() -> str:
    """helm install the operator chart into the KUBECONFIG cluster; the operator must turn Ready."""
    ns = os.environ.get("E2E_NAMESPACE", "slurm-operator-e2e")
    release = "e2e"
    kubectl = os.environ.get("KUBECTL", "kubectl")
    args = ["upgrade", "--install", release, str(OPERATOR), "--namespace", ns, "--create-namespace",
            "--wait", "--timeout", "180s"]
    image = os.environ.get("E2E_IMAGE")
    if image:
        repo, _, tag = image.rpartition(":")
        args += ["--set", f"image.repository={repo}", "--set", f"image.tag={tag}"]
    if os.environ.get("E2E_OUTPUT_IMAGE"):  # the helm test Pod's image, where Docker Hub is not reachable
        args += ["--set", f"outputPod.image={os.environ['E2E_OUTPUT_IMAGE']}"]
    p = subprocess.run([HELM, *args], capture_output=True, text=True)
    ensure(p.returncode == 0, f"helm {' '.join(args)}:\n{p.stderr}")
    try:
        p = subprocess.run([kubectl, "-n", ns, "rollout", "status", f"deployment/{release}-slurm-operator", "--timeout=120s"],
                           capture_output=True, text=True)
        ensure(p.returncode == 0, f"operator not Ready:\n{p.stdout}{p.stderr}")
        p = subprocess.run([kubectl, "wait", "--for=condition=Established", "--timeout=60s",
                            "crd/slurmclusters.slurm.rs", "crd/slurmjobs.slurm.rs", "crd/slurmnodesets.slurm.rs"],
                           capture_output=True, text=True)
        ensure(p.returncode == 0, f"CRDs not established:\n{p.stderr}")
        # `helm test`: the chart's test Pod reads /readyz through the Service.
        p = subprocess.run([HELM, "test", release, "--namespace", ns, "--timeout", "120s"], capture_output=True, text=True)
        ensure(p.returncode == 0, f"helm test {release}:\n{p.stdout}{p.stderr}")
    finally:
        if os.environ.get("E2E_KEEP") != "1":
            subprocess.run([HELM, "uninstall", release, "--namespace", ns, "--wait"], capture_output=True)
    return f"namespace {ns}"


# --- main ---------------------------------------------------------------------------------------

def main() -> int:
    global HELM
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--helm", default="helm")
    ap.add_argument("-k", "--only", help="run only checks whose name matches this regex")
    args = ap.parse_args()
    HELM = args.helm
    r = Runner(args.only)
    rel = lambda p: os.path.relpath(p, ROOT)  # noqa: E731

    for chart in (OPERATOR, CLUSTER):
        r.check(f"lint {rel(chart)}", t_lint(chart, None))
        for v in ci_values(chart):
            r.check(f"lint {rel(chart)} -f {rel(v)}", t_lint(chart, v))
    for chart in (OPERATOR, CLUSTER):
        r.check(f"render+validate {rel(chart)} (defaults)", t_render_valid(chart, ()))
        for v in ci_values(chart):
            r.check(f"render+validate {rel(chart)} -f {rel(v)}", t_render_valid(chart, (v,)))
    r.check("render+validate helm/slurm-operator (two namespaces, leader election, credentials elsewhere)",
            t_render_valid(OPERATOR, (), ("watchNamespaces={hpc,default}", "leaderElection.enabled=true", "replicas=2",
                                          "credentialsNamespace=slurm-admin")))
    for v in [()] + [(x,) for x in ci_values(CLUSTER)]:
        label = f" -f {rel(v[0])}" if v else " (defaults)"
        r.check(f"references helm/slurm-cluster{label}", t_references(CLUSTER, v, {"my-jwt-key", "my-slurm-key", "slurm-db"}))
        r.check(f"cluster wiring{label}", t_cluster_wiring(v))
    for v in [()] + [(x,) for x in ci_values(OPERATOR)]:
        label = f" -f {rel(v[0])}" if v else " (defaults)"
        r.check(f"references helm/slurm-operator{label}", t_references(OPERATOR, v, set()))

    r.check("crds: chart copy == crds/", t_crd_copy_in_sync)
    r.check("crds: rendered unchanged, kept on uninstall, optional", t_crds_render_unchanged)
    for watch, leader, creds in RBAC_MODES:
        r.check(f"rbac == rbac-rules.yaml ({rbac_mode_name(watch, leader, creds)})", t_rbac_mode(watch, leader, creds))
    r.check("rbac covers every Api<...> in src/", t_rbac_matches_code)
    r.check("rbac: Secrets/ConfigMaps only through the credentials namespace's Role, never a ClusterRole", t_rbac_secrets_confined)
    r.check("rbac: tenant-edit/tenant-view (aggregated) and admin ClusterRoles for people", t_rbac_user_roles)
    r.check("rbac: only the operator and the admins remove a SlurmJob's finalizer (ValidatingAdmissionPolicy)", t_finalizer_policy)
    r.check("operator: non-root, read-only, no capabilities, probes, resources", t_operator_security)
    r.check("operator: args, env and rollout strategy per values", t_operator_args)
    r.check("operator: NetworkPolicy admits only metricsFrom and the helm test Pod, only to the metrics port", t_operator_network_policy)
    r.check("services: slurmrestd and operator metrics stay ClusterIP unless allowExternal", t_services_not_external)
    r.check("operator: the tag key Secret, created or existing", t_tag_key)
    r.check("Dockerfile: static, non-root user = chart runAsUser, lean context", t_dockerfile)
    r.check("operator: PDB with replicas > 1, helm test Pod, extraObjects", t_operator_extras)
    r.check("operator: Artifact Hub annotations match crds/ and examples/tenancy/", t_artifacthub)
    r.check("operator: PrometheusRule and Grafana dashboard from files/, ServiceMonitor honorLabels", t_operator_monitoring)
    r.check("operator docs: the alerts and namespace verbs they list are the files'; Pods and Secrets, the output streamer as granted and coded",
            t_operator_docs_match)
    r.check("cluster: daemons non-root with limits, RuntimeDefault seccomp (slurmd too)", t_cluster_daemons_secure)
    r.check("pod templates: no chart/version labels, selectors unchanged, same after a chart version bump", t_pod_templates_version_stable)
    r.check("cluster: slurmctld and slurmdbd may take their startupTimeout to open their port", t_cluster_startup_probes)
    r.check("cluster: slurm.conf defaults and overrides", t_cluster_slurm_conf_defaults)
    r.check("cluster: partitions from nodesets, GresTypes", t_cluster_partitions)
    r.check("cluster: memory quantities -> RealMemory MiB", t_cluster_memory_conversion)
    r.check("cluster: slurm.cgroup confines jobs (cgroup plugins, cgroup.conf, privileged slurmd)", t_cluster_cgroup)
    r.check("cluster: slurmctld metrics (MetricsType, ServiceMonitor)", t_cluster_slurmctld_metrics)
    r.check("cluster NetworkPolicy: none unless networkPolicy.enabled", t_cluster_netpol_off_by_default)
    r.check("cluster NetworkPolicy: every connection the daemons make is admitted, on the port they use", t_cluster_netpol_admits_daemons)
    r.check("cluster NetworkPolicy: nothing else is admitted (MariaDB: slurmdbd; slurmrestd: login, slurmrestdFrom)", t_cluster_netpol_admits_nothing_else)
    r.check("secrets: generated, random, kept", t_secrets_generated)
    r.check("secrets: live values reused across upgrades (lookup logic)", t_secrets_reuse_logic)
    r.check("secrets: existingSecret used, nothing generated", t_secrets_existing)
    r.check("cluster: SlurmCluster credentials in the operator's credentials namespace, labelled; access", t_cluster_credentials)
    for chart, sets, want in SCHEMA_CASES:
        r.check(f"rejects {rel(chart)} --set {','.join(sets)}", t_schema_case(chart, sets, want))
    r.check("schema (slurm-cluster): image tags are strings; a number (tag: 10.10, the float 10.1) is refused, naming the field",
            t_cluster_image_tags_strings)
    r.check("schema (slurm-cluster): partition names and scaleIn.drainTimeout render exactly when the SlurmNodeSet CRD takes them",
            t_cluster_schema_matches_nodeset_crd)
    r.check("cluster: a helm upgrade changing cluster.name fails at render while the release's SlurmNodeSets name the old one (lookup)",
            t_cluster_name_change_guard)
    r.check("cluster: an autoscaled SlurmNodeSet's replicas are never the chart's to write",
            t_autoscaled_nodeset_replicas)
    r.check("cluster: a set's own 0, false, \"\" and [] win over nodesetDefaults (replicas: 0 stays 0)",
            t_nodeset_entry_over_defaults)
    r.check("cluster: a set's own image tag/repository is not overridden by images.slurmd.digest", t_nodeset_image_of_its_own)
    r.check("cluster: pollInterval and tokenLifetime render exactly when the SlurmCluster CRD takes them",
            t_cluster_durations_as_the_crd_takes_them)
    r.check("cluster: partition options replace or remove the chart's keys", t_partition_options_replace)
    r.check("cluster: numbers of a million and more are written whole, not as 1e+06", t_large_numbers_written_whole)
    r.check("cluster: SlurmNodeSets of cluster.nodeSetNamespaces can join the chart's partitions", t_other_namespaces_nodesets_join_partitions)
    r.check("cluster: an upgrade that renames the release's objects (fullnameOverride, nameOverride) fails at render", t_release_names_kept)
    r.check("schema (slurm-cluster): an access entry's empty namespaceSelector is refused", t_empty_namespace_selector_refused)
    r.check("NOTES (operator): the metrics hint names the rendered Service and works as printed", t_notes_metrics_service)
    r.check("NOTES (operator): admin and tenant steps with a valid SlurmCluster and SlurmJob", t_notes_operator)
    r.check("NOTES (slurm-cluster): a valid SlurmJob", t_notes_cluster)
    for path in example_files():
        r.check(f"example {rel(path)}: valid against the CRDs / Kubernetes", t_example_valid(path))
    r.check("examples/tenancy: Secret, SlurmCluster, namespaces, RBAC and SlurmJob agree", t_example_tenancy)
    r.check("examples/tenancy: the README's kubectl auth can-i answers hold", t_example_tenancy_rbac)
    r.check("examples/tenancy: README names every file and quotes the NoAccess message", t_example_tenancy_readme)
    r.check("READMEs: the manifests they show validate, no old kinds/fields", t_readme_manifests)

    import slurm_smoke
    why = slurm_smoke.unavailable()
    mode = os.environ.get("HELM_TEST_SLURM", "auto")  # auto: run when possible; 1: required; 0: skip
    name = "slurm smoke: the chart's slurm.conf, slurmd and slurmrestd command lines on real Slurm"
    if mode == "1" or (mode == "auto" and why is None):
        r.check(name, t_slurm_smoke if why is None else (lambda: ensure(False, why)))
    elif not args.only:
        print(f"SKIP {name}: {why or 'HELM_TEST_SLURM=0'}")

    if os.environ.get("KUBECONFIG"):
        r.check("e2e: helm install helm/slurm-operator, operator Ready", t_e2e_operator_ready)
    elif not args.only:
        print("SKIP e2e: KUBECONFIG is not set")

    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
