#!/usr/bin/env bash
# Installs the Debian packages qkern's build, tests, benchmarks and qk tool need.
# Silent when everything is present. Usage: scripts/install-deps.sh [--ci]  (--ci adds clang)
set -euo pipefail

packages=(cmake make g++ pkg-config libxsimd-dev libfmt-dev doctest-dev libbenchmark-dev libcli11-dev)
case "${1-}" in
    "") ;;
    --ci) packages+=(clang) ;;
    *) echo "usage: $0 [--ci]" >&2; exit 2 ;;
esac

missing=()
for package in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null) || true
    [[ $status == "install ok installed" ]] || missing+=("$package")
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

echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -qq -y --no-install-recommends "${missing[@]}" >/dev/null
