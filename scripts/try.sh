#!/usr/bin/env bash
# README command 1: build the qk tool (Release, in build/) and run it.
# Usage: scripts/try.sh [qk arguments...]   (default: `qk tour`; `scripts/try.sh info` runs `qk info`)
# Environment: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --target qk -j"$(nproc)"
exec "$build/qk" "${@:-tour}"
