#!/usr/bin/env bash
# Installs the Debian packages qkern's build, tests, benchmarks and qk tool need.
# Silent when everything is present. Usage: scripts/install-deps.sh [--ci] [--arm]
#   --ci   adds clang, OpenBLAS and Eigen, which the solve_tri benchmark compares against when it
#          finds them (so CI compiles those comparisons), and glslc, with which CI regenerates the
#          embedded shaders to compare them with the checked-in headers, and clang's libFuzzer
#          runtime (libclang-rt-14-dev, which Debian 12's clang only recommends) for CI's fuzz stage
#   --arm  adds the AArch64 cross build that runs under qemu-user (cmake/aarch64-linux-gnu.cmake):
#          the cross g++, qemu-user, and the arm64 libfmt-dev (the tests and qk link fmt) and
#          libbenchmark-dev (CI cross-compiles the benchmarks too) through Debian multiarch, which
#          this enables for arm64 (dpkg --add-architecture) if needed
set -euo pipefail

# libvulkan-dev and mesa-vulkan-drivers (lavapipe, Mesa's CPU Vulkan driver) let the Vulkan
# backend's tests run on any machine.
packages=(cmake make g++ pkg-config libxsimd-dev libfmt-dev doctest-dev libbenchmark-dev libcli11-dev
    libvulkan-dev mesa-vulkan-drivers)
for option in "$@"; do
    case "$option" in
        --ci) packages+=(clang libclang-rt-14-dev libopenblas-dev libeigen3-dev glslc) ;;
        --arm) packages+=(g++-aarch64-linux-gnu qemu-user libfmt-dev:arm64 libxsimd-dev:arm64 libbenchmark-dev:arm64) ;;
        *) echo "usage: $0 [--ci] [--arm]" >&2; exit 2 ;;
    esac
done

# A name without an architecture means the native one (or `all`). dpkg-query lists every
# installed architecture of a multiarch package, one line each.
native=$(dpkg --print-architecture)
installed() {
    local name=${1%%:*} arch=$native
    [[ $1 == *:* ]] && arch=${1#*:}
    # grep reads all of its input (no -q, which stops at the first match): under pipefail an early
    # exit could kill the writer with SIGPIPE and turn a match into a failure.
    dpkg-query -W -f='${Status} ${Architecture}\n' "$name" 2>/dev/null | grep -E "^install ok installed ($arch|all)\$" >/dev/null
}

missing=()
foreign=()
for package in "${packages[@]}"; do
    installed "$package" && continue
    missing+=("$package")
    if [[ $package == *:* && ${package#*:} != "$native" ]]; then
        foreign+=("${package#*:}")
    fi
done
((${#missing[@]} == 0)) && exit 0

as_root=()
if ((EUID != 0)); then
    if ! command -v sudo >/dev/null; then
        echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2
        exit 1
    fi
    as_root=(sudo)
fi

for arch in "${foreign[@]}"; do
    if ! dpkg --print-foreign-architectures | grep -xF "$arch" >/dev/null; then
        echo "install-deps: enabling the $arch architecture (dpkg --add-architecture $arch)"
        "${as_root[@]}" dpkg --add-architecture "$arch"
    fi
done

echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -qq -y --no-install-recommends "${missing[@]}" >/dev/null
