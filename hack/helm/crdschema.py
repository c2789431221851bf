"""Validate custom resources against a CRD's openAPIV3Schema, offline.

The API server validates a custom resource with the CRD's structural schema: OpenAPI v3 with
Kubernetes extensions. This module turns that schema into a JSON Schema (draft 2020-12) that
`jsonschema` can check, and evaluates the CEL rules (`x-kubernetes-validations`) our CRDs use:

* `nullable: true`                    -> null is allowed as well as the declared type
* `x-kubernetes-int-or-string: true`  -> integer or string
* `x-kubernetes-preserve-unknown-fields: true` -> unknown fields allowed
* `x-kubernetes-embedded-resource`    -> apiVersion/kind/metadata allowed
* objects with `properties` and no `additionalProperties` -> unknown fields are an error
  (what `kubectl apply` does with its default server-side field validation, Strict)
* `format` (int32, int64, date-time, ...) is not checked, as jsonschema does by default
* `x-kubernetes-validations`: each rule is looked up in CEL_RULES, a small table of Python
  equivalents of the rules the CRDs contain, then matched against a few rule shapes
  (`self.matches('RE')`, `self.startsWith('X')`, a key allowlist). A rule neither knows is reported as
  "not evaluated" (the caller decides whether that fails); transition rules (oldSelf) apply
  to updates only and are skipped.

Apply defaults first? No: the API server defaults before it validates, so a value left out
here that has a default is fine there; leaving defaults out only makes this check stricter.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import jsonschema

# --- the CEL rules our CRDs use, in Python --------------------------------------------------

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """A Go/CEL duration string ("1h2m3.5s") in seconds; ValueError when it is not one."""
    pos, total = 0, 0.0
    if not text:
        raise ValueError("empty duration")
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if not m:
            raise ValueError(f"not a duration: {text!r}")
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    return total


_QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_QUANTITY_FACTOR = {
    None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}


def quantity_value(text: str) -> float:
    """A Kubernetes resource.Quantity as a number; ValueError when it is not one."""
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = float(m.group(1)), m.group(2)
    if suffix and suffix[0] in "eE":
        return number * 10 ** int(suffix[1:])
    return number * _QUANTITY_FACTOR[suffix]


def _is_quantity_gt0(v: Any) -> bool:
    try:
        return quantity_value(str(v)) > 0
    except ValueError:
        return False


def _duration_between(lo: float, hi: float) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        try:
            return lo <= duration_seconds(str(v)) <= hi
        except ValueError:
            return False

    return check


def _lower_ascii(v: Any) -> str:
    """CEL's `lowerAscii()`: only A-Z change (Python's `lower()` also folds other letters)."""
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in str(v))


def _is_http_url(v: Any) -> bool:
    return isinstance(v, str) and re.match(r"^(?i:https?)://[^\s/?#]+([/?#]\S*)?$", v) is not None


CEL_RULES: dict[str, Callable[[Any], bool]] = {
    "!(has(self.caSecretRef) && has(self.caConfigMapRef))":
        lambda s: not ("caSecretRef" in s and "caConfigMapRef" in s),
    # A URL's scheme is case-insensitive (`HTTP://` is plain http), so the rules lower it first.
    "!has(self.tls) || self.endpoint.lowerAscii().startsWith('https://')":
        lambda s: "tls" not in s or _lower_ascii(s.get("endpoint", "")).startswith("https://"),
    "!self.insecureSkipVerify || !(has(self.caSecretRef) || has(self.caConfigMapRef))":
        lambda s: not s.get("insecureSkipVerify", False) or not ("caSecretRef" in s or "caConfigMapRef" in s),
    "duration(self) >= duration('100ms') && duration(self) <= duration('5m')": _duration_between(0.1, 300),
    "duration(self) >= duration('30s') && duration(self) <= duration('15m')": _duration_between(30, 900),
    "duration(self) <= duration('8760h')": _duration_between(0, 8760 * 3600),
    "has(self.jwt) != has(self.tokenSecretRef)": lambda s: ("jwt" in s) != ("tokenSecretRef" in s),
    "isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))": _is_quantity_gt0,
    "size(string(self)) <= 64": lambda s: len(str(s)) <= 64,
    "self.all(k, size(k) > 0 && !k.contains('='))": lambda s: all(k and "=" not in k for k in s),
    "isURL(self) && url(self).getScheme() in ['http', 'https']": _is_http_url,
    "self.type == 'RollingUpdate' || !has(self.rollingUpdate)":
        lambda s: s.get("type", "RollingUpdate") == "RollingUpdate" or "rollingUpdate" not in s,
    "string(self).matches('^([1-9][0-9]{0,8}|(100|[1-9][0-9]?)%)$')":
        lambda s: re.fullmatch(r"([1-9][0-9]{0,8}|(100|[1-9][0-9]?)%)", str(s)) is not None,
    # SlurmCluster: http:// only when allowed; access entries.
    "!self.endpoint.lowerAscii().startsWith('http://') || self.allowInsecureHttp":
        lambda s: not _lower_ascii(s.get("endpoint", "")).startswith("http://") or s.get("allowInsecureHttp", False) is True,
    "size(self.namespaces) > 0 || has(self.namespaceSelector)":
        lambda s: len(s.get("namespaces") or []) > 0 or "namespaceSelector" in s,
    "!has(self.namespaceSelector) "
    "|| (has(self.namespaceSelector.matchLabels) && size(self.namespaceSelector.matchLabels) > 0) "
    "|| (has(self.namespaceSelector.matchExpressions) && size(self.namespaceSelector.matchExpressions) > 0)":
        lambda s: "namespaceSelector" not in s
        or len(s["namespaceSelector"].get("matchLabels") or {}) > 0
        or len(s["namespaceSelector"].get("matchExpressions") or []) > 0,
    # The names' length is the items' maxLength (a bound the API server prices the rule by).
    "self.all(n, n.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))":
        lambda s: all(isinstance(n, str) and re.search(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", n) for n in s),
    # SlurmJob.
    "!has(self.spec.dependsOn) || self.spec.dependsOn.all(d, d.name != self.metadata.name)":
        lambda s: all(d.get("name") != s.get("metadata", {}).get("name") for d in (s.get("spec") or {}).get("dependsOn") or []),
    "!self.matches('^[1-9][0-9]{0,8}-[1-9][0-9]{0,8}$') || int(self.split('-')[0]) <= int(self.split('-')[1])":
        lambda s: not re.search(r"^[1-9][0-9]{0,8}-[1-9][0-9]{0,8}$", s) or int(s.split("-")[0]) <= int(s.split("-")[1]),
    "!self.startsWith('/') && self != '..' && !self.startsWith('../') && !self.endsWith('/..') && !self.contains('/../')":
        lambda s: not s.startswith("/") and s != ".." and not s.startswith("../") and not s.endswith("/..") and "/../" not in s,
    "duration(self) >= duration('1m')": _duration_between(60, float("inf")),
    "self >= 1": lambda s: isinstance(s, int) and not isinstance(s, bool) and s >= 1,
    # SlurmJob: options that say one thing twice.
    "!(has(self.memoryPerNode) && has(self.memoryPerCpu))":
        lambda s: not ("memoryPerNode" in s and "memoryPerCpu" in s),
    "!(has(self.tres) && has(self.tresPerTask))":
        lambda s: not ("tres" in s and "tresPerTask" in s),
    "!has(self.gpusPerNode) || !has(self.gres) || !self.gres.contains('gpu')":
        lambda s: "gpusPerNode" not in s or "gres" not in s or "gpu" not in str(s["gres"]),
    "!has(self.gpusPerTask) || ((!has(self.tresPerTask) || !self.tresPerTask.contains('gpu')) && (!has(self.tres) || !self.tres.contains('gpu')))":
        lambda s: "gpusPerTask" not in s or (
            ("tresPerTask" not in s or "gpu" not in str(s["tresPerTask"]))
            and ("tres" not in s or "gpu" not in str(s["tres"]))),
    "!has(self.output) || (!has(self.standardOutput) && !has(self.standardError))":
        lambda s: "output" not in s or ("standardOutput" not in s and "standardError" not in s),
    "!(has(self.output) && has(self.array))":
        lambda s: not ("output" in s and "array" in s),
    # In CEL, '\\' is one backslash.
    "!self.contains('%') && !self.contains('\\\\')":
        lambda s: isinstance(s, str) and "%" not in s and "\\" not in s,
    # SlurmCluster: tenants' jobs never run as root, nor as the cluster's own user unless allowed.
    "self != 'root'": lambda s: s != "root",
    "!has(self.auth.jwt) || !has(self.access) || self.access.all(a, "
    "a.slurmUser != self.auth.jwt.user || (has(a.allowClusterUser) && a.allowClusterUser))":
        lambda s: not (s.get("auth") or {}).get("jwt") or not s.get("access")
        or all(a.get("slurmUser") != s["auth"]["jwt"].get("user", "slurm") or a.get("allowClusterUser") is True
               for a in s["access"]),
    # SlurmNodeSet: slurmd restarts in its pod (the template's restartPolicy).
    "!has(self.spec) || !has(self.spec.restartPolicy) || self.spec.restartPolicy == 'Always'":
        lambda s: (s.get("spec") or {}).get("restartPolicy", "Always") == "Always",
    # SlurmNodeSet: its name makes node names `<name>-<tag>-<ordinal>` (DNS labels).
    "size(self.metadata.name) <= 46 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')":
        lambda s: (lambda n: isinstance(n, str) and len(n) <= 46
                   and re.search(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", n) is not None)(
            (s.get("metadata") or {}).get("name")),
}

# Rules of one shape, whatever their literal: `self.matches('RE')` (RE2 search, like re.search
# for the patterns our CRDs use), `self.startsWith('X')`, and a map's keys in a list
# (`self.all(k, k in ['a', 'b'])`, the SlurmJob extraOptions allowlist).
_CEL_SHAPES: list[tuple[re.Pattern, Callable[[re.Match], Callable[[Any], bool]]]] = [
    (re.compile(r"^self\.matches\('([^']*)'\)$"),
     lambda m: lambda v, pat=m.group(1): isinstance(v, str) and re.search(pat, v) is not None),
    (re.compile(r"^self\.startsWith\('([^']*)'\)$"),
     lambda m: lambda v, pre=m.group(1): isinstance(v, str) and v.startswith(pre)),
    (re.compile(r"^self\.all\(k, k in \[((?:'[^']*'(?:, )?)*)\]\)$"),
     lambda m: lambda v, allowed=frozenset(re.findall(r"'([^']*)'", m.group(1))): all(k in allowed for k in v)),
]


def cel_rule(text: str) -> Callable[[Any], bool] | None:
    """The Python equivalent of one CEL rule, or None when this module does not know it."""
    fn = CEL_RULES.get(text)
    if fn is not None:
        return fn
    for shape, make in _CEL_SHAPES:
        m = shape.match(text)
        if m:
            return make(m)
    return None


# --- schema conversion -----------------------------------------------------------------------

_DROP = {"x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
         "x-kubernetes-map-type", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string",
         "x-kubernetes-preserve-unknown-fields", "nullable", "format", "example", "externalDocs"}


def to_json_schema(s: dict) -> dict:
    """One OpenAPI v3 (structural) schema node -> a JSON Schema node."""
    out: dict[str, Any] = {}
    for key, value in s.items():
        if key in _DROP:
            continue
        if key == "properties":
            out["properties"] = {k: to_json_schema(v) for k, v in value.items()}
        elif key == "items":
            out["items"] = to_json_schema(value) if isinstance(value, dict) else value
        elif key == "additionalProperties":
            out["additionalProperties"] = to_json_schema(value) if isinstance(value, dict) else value
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(v) for v in value]
        elif key == "not":
            out["not"] = to_json_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    if s.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = out.get("anyOf", []) + [{"type": "integer"}, {"type": "string"}]
    embedded = s.get("x-kubernetes-embedded-resource")
    if embedded:
        out.setdefault("properties", {})
        for k in ("apiVersion", "kind"):
            out["properties"].setdefault(k, {"type": "string"})
        out["properties"].setdefault("metadata", {"type": "object"})
    if ("properties" in out and "additionalProperties" not in s
            and not s.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    if s.get("nullable"):
        t = out.get("type")
        if isinstance(t, str):
            out["type"] = [t, "null"]
        elif "anyOf" in out:
            out["anyOf"] = out["anyOf"] + [{"type": "null"}]
        if "enum" in out:
            out["enum"] = list(out["enum"]) + [None]
    return out


@dataclass
class Result:
    errors: list[str] = field(default_factory=list)
    not_evaluated: list[str] = field(default_factory=list)  # CEL rules missing from CEL_RULES


def _walk_cel(schema: dict, value: Any, path: str, result: Result) -> None:
    if value is None:
        return
    for rule in schema.get("x-kubernetes-validations", []) or []:
        text = rule["rule"]
        if "oldSelf" in text:
            continue  # transition rule: applies to updates only
        fn = cel_rule(text)
        if fn is None:
            result.not_evaluated.append(f"{path or '.'}: {text}")
            continue
        if not fn(value):
            where = path + rule.get("fieldPath", "")
            result.errors.append(f"{where or '.'}: {rule.get('message', text)} (CEL: {text})")
    if isinstance(value, dict):
        for k, sub in (schema.get("properties") or {}).items():
            if k in value:
                _walk_cel(sub, value[k], f"{path}.{k}", result)
        ap = schema.get("additionalProperties")
        if isinstance(ap, dict):
            for k, v in value.items():
                if k not in (schema.get("properties") or {}):
                    _walk_cel(ap, v, f"{path}.{k}", result)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk_cel(schema["items"], item, f"{path}[{i}]", result)


class CrdValidator:
    """Validates objects of the kinds a set of CRDs define."""

    def __init__(self, crds: list[dict]):
        self._versions: dict[tuple[str, str], dict] = {}
        for crd in crds:
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                if v.get("served", True):
                    self._versions[(f"{group}/{v['name']}", kind)] = v["schema"]["openAPIV3Schema"]

    def knows(self, obj: dict) -> bool:
        return (obj.get("apiVersion"), obj.get("kind")) in self._versions

    def validate(self, obj: dict) -> Result:
        result = Result()
        raw = self._versions.get((obj.get("apiVersion"), obj.get("kind")))
        if raw is None:
            result.errors.append(f"no CRD for {obj.get('apiVersion')} {obj.get('kind')}")
            return result
        schema = to_json_schema(raw)
        props = schema.setdefault("properties", {})
        props["apiVersion"] = {"type": "string"}
        props["kind"] = {"type": "string"}
        props["metadata"] = {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", "maxLength": 253}},
        }
        validator = jsonschema.Draft202012Validator(schema)
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
            where = "." + ".".join(str(p) for p in err.absolute_path)
            result.errors.append(f"{where}: {err.message}")
        _walk_cel(raw, obj, "", result)
        return result
