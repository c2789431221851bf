#!/usr/bin/env bash
# Builds the operator's OCI image on a machine with no container engine and no registry access:
# the release binary plus the few files it needs, taken from Debian's packages, assembled with
# Debian's umoci and written as an OCI archive with skopeo. No shell, no package manager in the
# image; it runs as the non-root user 65532 (`nonroot`).
#
# Usage: hack/image.sh [--binary PATH] [--out FILE] [--tag TAG]
#
#   --binary PATH   the operator binary (default target/image/slurm-operator, the size-optimised
#                   profile `image` in Cargo.toml: `cargo build --profile image --locked --bin
#                   slurm-operator`; docs/building.md has its build time and size against
#                   `--release`). Debug information is stripped in the image.
#   --out FILE      the OCI archive to write (default target/oci/slurm-operator-<TAG>.oci.tar)
#   --tag TAG       the image tag inside the archive (default: the crate version)
#
# Image contents: /usr/local/bin/slurm-operator (entrypoint; default command `run`), the shared
# libraries the binary links (from the packages that own them on this machine, fetched with
# `apt-get download` at the installed version, with their copyright files), the CA bundle built
# from Debian's ca-certificates (for https:// slurmrestd endpoints without a cluster-specific
# CA), /etc/passwd and /etc/group with root and nonroot, an empty /tmp.
#
# Push it to a registry (from any machine that reaches one):
#   skopeo copy oci-archive:target/oci/slurm-operator-0.1.0.oci.tar \
#       docker://registry.example.org/slurm-operator:0.1.0
# or load it into a node's containerd: `ctr -n k8s.io images import <archive>`.
#
# Needs root only to install umoci and skopeo when they are missing (apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "image: $*" >&2; exit 1; }
log() { echo "image: $*" >&2; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
binary=target/image/slurm-operator
tag=$version
out=
while (($#)); do
    case "$1" in
        --binary) binary=${2:?--binary needs a path}; shift ;;
        --out) out=${2:?--out needs a file}; shift ;;
        --tag) tag=${2:?--tag needs a value}; shift ;;
        -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done
out=${out:-target/oci/slurm-operator-$tag.oci.tar}
[[ -x $binary ]] || die "no binary at $binary: build it first (cargo build --profile image --locked --bin slurm-operator) or pass --binary"
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "not an image tag: $tag"

missing=()
for tool in umoci skopeo; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
    [[ $EUID -eq 0 ]] || die "install ${missing[*]} (Debian packages of the same names)"
    log "installing ${missing[*]} from Debian"
    # A fresh machine may have no package lists yet: fetch them once and try again.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$work/debs" "$work/pkgs"
# apt-get download drops privileges to _apt, which must reach the download directory.
chmod a+rx "$work"
chmod a+rwx "$work/debs"

# The binary, stripped of debug information (smaller; panics still name functions).
strip --strip-debug -o "$rootfs/usr/local/bin/slurm-operator" "$binary"
chmod 0755 "$rootfs/usr/local/bin/slurm-operator"

# Which package owns `path` on this machine (merged /usr: dpkg may know it by either name).
owner_of() {
    local path=$1 alt
    dpkg -S "$path" 2>/dev/null && return
    case $path in
        /usr/*) alt=${path#/usr} ;;
        *) alt=/usr$path ;;
    esac
    dpkg -S "$alt" 2>/dev/null
}

# Fetch and unpack a package at the version installed here (the one the binary was linked
# against), once.
unpacked() {
    local pkg=$1 version
    if [[ ! -d $work/pkgs/$pkg ]]; then
        version=$(dpkg-query -W -f '${Version}' "$pkg")
        (cd "$work/debs" && apt-get download -qq "$pkg=$version" >/dev/null 2>&1) ||
            { [[ $EUID -eq 0 ]] && apt-get update -qq && (cd "$work/debs" && apt-get download -qq "$pkg=$version" >/dev/null); } ||
            die "cannot download $pkg=$version from Debian"
        dpkg-deb -x "$work"/debs/"${pkg%%:*}"_*.deb "$work/pkgs/$pkg"
    fi
    echo "$work/pkgs/$pkg"
}

# `path` inside the unpacked tree `root`, following symlinks inside that tree (absolute links
# resolve against `root`, not against this machine).
resolve_in() {
    local root=$1 path=$2 target hops=0
    for candidate in "$path" "/usr$path" "${path#/usr}"; do
        [[ -e $root$candidate || -L $root$candidate ]] && { path=$candidate; break; }
    done
    while [[ -L $root$path ]]; do
        ((hops++ < 16)) || die "symlink loop at $path"
        target=$(readlink "$root$path")
        case $target in
            /*) path=$target ;;
            *) path=$(dirname "$path")/$target ;;
        esac
        [[ -e $root$path || -L $root$path ]] || path=/usr$path
    done
    [[ -f $root$path ]] || die "$path is not in the package"
    echo "$root$path"
}

# The shared libraries and the ELF interpreter, at the paths the binary asks for.
libs=$(ldd "$binary" | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}')
[[ -n $libs ]] || die "ldd found no libraries in $binary (a static binary needs none: drop this step)"
declare -A packages=()
for lib in $libs; do
    owner=$(owner_of "$(readlink -f "$lib")" || owner_of "$lib") || die "no Debian package owns $lib"
    pkg=${owner%%:*}
    [[ $pkg == *" "* || $pkg == *,* ]] && die "ambiguous owner of $lib: $owner"
    dir=$(unpacked "$pkg")
    packages[$pkg]=1
    mkdir -p "$rootfs$(dirname "$lib")"
    cp "$(resolve_in "$dir" "$lib")" "$rootfs$lib"
    log "library $lib from $pkg $(dpkg-query -W -f '${Version}' "$pkg")"
done

# The CA bundle, as update-ca-certificates builds it, from Debian's ca-certificates.
ca=$(unpacked ca-certificates)
packages[ca-certificates]=1
cat "$ca"/usr/share/ca-certificates/mozilla/*.crt >"$rootfs/etc/ssl/certs/ca-certificates.crt"

# Licences of everything taken from Debian. A package whose doc directory is a symlink (Debian
# policy 12.5: to a package of the same source it depends on, e.g. libgcc-s1 -> gcc-12-base)
# has its copyright file in that package.
for pkg in "${!packages[@]}"; do
    doc=$work/pkgs/$pkg/usr/share/doc/$pkg
    from=$pkg
    if [[ -L $doc ]]; then
        from=$(basename "$(readlink "$doc")")
        doc=$(unpacked "$from")/usr/share/doc/$from
    fi
    [[ -f $doc/copyright ]] || die "$pkg has no copyright file"
    install -D -m 0644 "$doc/copyright" "$rootfs/usr/share/doc/$from/copyright"
done

printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
install -d -m 1777 "$rootfs/tmp"
install -d -m 0700 -o 65532 -g 65532 "$rootfs/home/nonroot"

for shell in bin/sh usr/bin/sh bin/bash usr/bin/bash bin/busybox; do
    [[ ! -e $rootfs/$shell ]] || die "a shell got into the image: /$shell"
done

# Assemble: an empty image, its bundle's rootfs replaced by ours, repacked as one layer.
layout=$work/layout
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
rm -rf "$work/bundle/rootfs"
mv "$rootfs" "$work/bundle/rootfs"
umoci repack --image "$layout:$tag" "$work/bundle"
umoci config --image "$layout:$tag" \
    --os linux --architecture "$(dpkg --print-architecture)" \
    --config.user 65532:65532 \
    --config.workingdir / \
    --config.entrypoint /usr/local/bin/slurm-operator \
    --config.cmd run \
    --config.exposedports 8080/tcp \
    --config.env PATH=/usr/local/bin \
    --config.label org.opencontainers.image.title=slurm-operator \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label org.opencontainers.image.licenses=Apache-2.0 \
    --config.label "org.opencontainers.image.description=Kubernetes operator that drives Slurm through slurmrestd (auth/jwt)"
umoci gc --layout "$layout"

mkdir -p "$(dirname "$out")"
rm -f "$out"
skopeo copy --quiet "oci:$layout:$tag" "oci-archive:$out:$tag"
log "wrote $out ($(du -h "$out" | cut -f1)) with slurm-operator:$tag"
echo "$out"
