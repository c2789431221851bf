#!/usr/bin/env bash
# The whole test suite (pipefail: a failing cargo test fails the script through its tee):
#   format and lint gates, generated-artefact checks, unit tests, and integration tests against a
#   REAL local Slurm that this script brings up first (hack/slurm-up.sh; cached under /var/tmp).
# Integration tests are required here (SLURM_OPERATOR_REQUIRE_SLURM=1): if Slurm is not there,
# they fail instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${SLURM_FLAVOUR:-trixie}
step() { printf '\n== %s\n' "$*"; }

step "toolchain"
if ! command -v cargo >/dev/null; then
    echo "cargo is required (rustup toolchain)" >&2
    exit 1
fi
cargo --version

step "busybox (the output Pod's default image's tools: its streamer script is run with them too)"
if ! command -v busybox >/dev/null; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox; } >/dev/null 2>&1 ||
        { echo "could not install busybox (apt-get install busybox)" >&2; exit 1; }
fi
echo "busybox: $(command -v busybox)"

step "local Slurm ($flavour)"
bash hack/slurm-up.sh --flavour "$flavour"
# Where slurm-up.sh keeps its state ($SLURM_BASE): its own rule, from its library.
# shellcheck source=hack/lib/slurm-common.sh
source hack/lib/slurm-common.sh
export SLURM_ENV_FILE=$SLURM_BASE/$flavour/env
export SLURM_OPERATOR_REQUIRE_SLURM=1

step "generated artefacts are current (CRDs in crds/ and in the chart)"
bash hack/gen-crds.sh --check

step "generated slurmrestd client is current (src/slurm/generated/, openapi/processed/)"
bash hack/gen-client.sh --check

step "cargo fmt --check (and the facade source every REST API version includes)"
cargo fmt --all --check
rustfmt --edition 2024 --check src/slurm/dialect/shared.rs

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --locked --workspace --all-targets -- -D warnings

step "Helm charts: lint, render, validate against Kubernetes and our CRD schemas"
bash hack/helm-test.sh

step "cargo test (the workspace: unit, fixture and integration tests; tools/gen-client; the fake API server's conformance tests)"
cargo test --locked --workspace --no-fail-fast 2>&1 | tee "${TEST_LOG:-/dev/null}"

# The same facade tests against the other Slurm release (26.05 from Debian forky), so an API
# difference between versions shows up here and not in a user's cluster. SLURM_COMPARE=0 skips.
if [ "${SLURM_COMPARE:-1}" = 1 ] && [ "$flavour" = trixie ]; then
    step "integration tests against Slurm 26.05 (forky)"
    bash hack/slurm-up.sh --flavour forky
    SLURM_FLAVOUR=forky SLURM_ENV_FILE=$SLURM_BASE/forky/env \
        cargo test --locked --test slurm_client --test slurm_tls --test cli_check --test api_versions 2>&1 | tee -a "${TEST_LOG:-/dev/null}"
fi
