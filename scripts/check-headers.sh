#!/usr/bin/env bash
# Fails unless every public header compiles on its own (a translation unit that includes only it,
# -fsyntax-only -Wall -Wextra -Wpedantic -Werror), so that users can include the per-area headers
# (kernels/dot.hpp, gguf/gguf.hpp, sampling/sampling.hpp, ...) instead of the umbrella; and unless
# <qkern.hpp> leaves out every GPU backend that is not enabled: without QKERN_ENABLE_VULKAN and
# QKERN_ENABLE_METAL it may reach only backends/vulkan/vulkan.hpp and architecture.hpp and
# backends/metal/metal.hpp, no host code of backends/gpu and no generated shader header.
#
# The Vulkan host headers are compiled where <vulkan/vulkan.h> is found (libvulkan-dev), and
# vulkan.hpp and qkern.hpp once more with QKERN_ENABLE_VULKAN; the Apple-only Metal host headers
# against the declaration-only stand-in of metal-cpp in tests/metal/api_stand_in.
# Usage: scripts/check-headers.sh (CXX picks the compiler, default g++; JOBS the parallel
# compiles, default the number of CPUs)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cxx=${CXX:-g++}
jobs=${JOBS:-$(nproc)}
flags=(-std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -Iinclude -Itests/metal/api_stand_in)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

have_vulkan=0
if printf '#include <vulkan/vulkan.h>\n' | "$cxx" -x c++ -fsyntax-only - 2>/dev/null; then
    have_vulkan=1
fi

# One line per compile: the header, then the extra flags.
list=$work/list
: >"$list"
while IFS= read -r header; do
    if [[ $header == backends/vulkan/* && $header != backends/vulkan/vulkan.hpp && $header != backends/vulkan/architecture.hpp ]] &&
        ((!have_vulkan)); then
        continue
    fi
    printf '%s\n' "$header" >>"$list"
done < <(cd include && find . -name '*.hpp' | sed 's|^\./||' | LC_ALL=C sort)
if ((have_vulkan)); then
    printf '%s\n' "backends/vulkan/vulkan.hpp -DQKERN_ENABLE_VULKAN=1" "qkern.hpp -DQKERN_ENABLE_VULKAN=1" >>"$list"
fi

# compile_one HEADER [FLAGS...]: prints nothing on success, the header and the errors otherwise.
export cxx work
export flags_joined="${flags[*]}"
compile_one() {
    local header=$1
    shift
    local log
    log=$(mktemp "$work/log.XXXXXX")
    # shellcheck disable=SC2086 # flags_joined holds several arguments, none with spaces
    if ! printf '#include <%s>\n' "$header" | "$cxx" $flags_joined "$@" -x c++ - >"$log" 2>&1; then
        printf 'check-headers: %s %s does not compile on its own:\n' "$header" "$*"
        head -n 20 "$log"
    fi
}
export -f compile_one

failures=$(xargs -P "$jobs" -L 1 bash -c 'compile_one "$@"' _ <"$list")
count=$(wc -l <"$list")
if [[ -n $failures ]]; then
    printf '%s\n' "$failures" >&2
    echo "check-headers: $(grep -c '^check-headers: ' <<<"$failures") of $count header compiles failed" >&2
    exit 1
fi

# What <qkern.hpp> reaches with no GPU backend enabled.
# (-M names a header as reached, e.g. include/backends/cpu/../../kernels/dot.hpp: normalised here.)
# shellcheck disable=SC1003 # '\\' is tr's backslash, not an escaped quote
gpu=$(printf '#include <qkern.hpp>\n' | "$cxx" -std=c++20 -Iinclude -x c++ - -M -MT x | tr -s ' \\' '\n' |
    grep '^include/' | xargs realpath -m --relative-to=include | grep -E '^backends/(gpu|vulkan|metal)/|/generated/' |
    grep -vxE 'backends/vulkan/(vulkan|architecture)\.hpp|backends/metal/metal\.hpp' || true)
if [[ -n $gpu ]]; then
    echo "check-headers: <qkern.hpp> without QKERN_ENABLE_VULKAN or QKERN_ENABLE_METAL includes GPU backend code:" >&2
    while IFS= read -r line; do echo "  $line"; done <<<"$gpu" >&2
    exit 1
fi
echo "check-headers: $count header compiles on their own passed$( ((have_vulkan)) || echo ' (no Vulkan headers: the Vulkan host headers skipped)'); <qkern.hpp> reaches no GPU backend that is not enabled"
