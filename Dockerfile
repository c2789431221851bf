# syntax=docker/dockerfile:1
# The slurm-operator image: one static (musl) binary on distroless/static, running as the
# distroless `nonroot` user (65532). Build from the repository root:
#
#   docker build -t slurm-operator:0.1.0 .
#
# The Helm chart's default image is ghcr.io/slurm-rs/slurm-operator:<appVersion>; to run your
# own build, push it to a registry your cluster pulls from (or `kind load docker-image
# slurm-operator:0.1.0`) and set image.repository.
#
# RUST_VERSION pins the toolchain (the one the repository is tested with); the alpine image
# builds for x86_64/aarch64-unknown-linux-musl natively, so the binary is fully static.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-alpine AS build
# make: tikv-jemalloc-sys builds jemalloc (the binary's allocator) from source.
RUN apk add --no-cache musl-dev make
WORKDIR /src
# .cargo/config.toml comes along: it holds jemalloc's compiled-in settings.
COPY . .
# The slurmrestd client is committed (src/slurm/generated/, from tools/gen-client), so nothing is
# generated here; tools/ comes along only because it is a workspace member. ring and jemalloc
# need a C compiler, which the rust:alpine image has.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin slurm-operator \
 && install -D -m 0755 target/release/slurm-operator /out/slurm-operator \
 && /out/slurm-operator --version

# distroless/static: no shell, no package manager; CA certificates in /etc/ssl/certs (used to
# verify https:// slurmrestd endpoints without a Cluster-specific CA), and /etc/passwd with
# the nonroot user.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="slurm-operator" \
      org.opencontainers.image.description="Kubernetes operator that drives Slurm through slurmrestd (auth/jwt)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/slurm-operator /usr/local/bin/slurm-operator
USER 65532:65532
# /healthz, /readyz, /metrics
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/slurm-operator"]
CMD ["run"]
