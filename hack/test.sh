#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one:
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

step "local Slurm ($flavour)"
bash hack/slurm-up.sh --flavour "$flavour"
export SLURM_ENV_FILE=${SLURM_ENV_FILE:-/var/tmp/slurm-operator/$flavour/env}
[ -r "$SLURM_ENV_FILE" ] || SLURM_ENV_FILE=${TMPDIR:-/tmp}/slurm-operator/$flavour/env
export SLURM_OPERATOR_REQUIRE_SLURM=1

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --locked --all-targets -- -D warnings

step "cargo test (unit, fixture and integration tests)"
cargo test --locked --no-fail-fast 2>&1 | tee "${TEST_LOG:-/dev/null}"
