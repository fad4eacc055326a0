#!/usr/bin/env bash
# README command 2: configure (Release, in build/, shared with try.sh), build everything and run the
# tests, as many at once as there are cores.
# Usage: scripts/test.sh [extra cmake configure arguments...]
# Environment: BUILD_DIR (default build); QKERN_CMAKE_ARGS, more configure arguments split on
# whitespace (given before the command-line ones, so those win); QKERN_CTEST_ARGS, arguments for
# ctest split on whitespace (CI uses it to run the Vulkan tests at one subgroup size in some stages);
# QKERN_TEST_BUILD_ONLY=1 builds without running (CI, for an instruction set this CPU lacks).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh
build=${BUILD_DIR:-build}
read -ra env_args <<<"${QKERN_CMAKE_ARGS-}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${env_args[@]}" "$@"
cmake --build "$build" -j"$(nproc)"
if [[ -n ${QKERN_TEST_BUILD_ONLY-} ]]; then
    echo "test.sh: built in $build; not running the tests (QKERN_TEST_BUILD_ONLY)"
    exit 0
fi
read -ra ctest_args <<<"${QKERN_CTEST_ARGS-}"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "${ctest_args[@]}"

# CTest shows a passing test's output only in its log: repeat doctest's summary of each executable.
awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 }
     /^\[doctest\] (test cases|assertions):/ { print name ": " $0 }' \
    "$build/Testing/Temporary/LastTest.log"
