#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan and UBSan, every report fatal) and runs it for a
# bounded time. Usage: scripts/fuzz.sh TARGET [SECONDS, default 60]. TARGET is the name of the
# target's source file without its extension: fuzz/TARGET.cpp. Every target may include the qk
# tool's headers as qk's own source does ("qk/..." from examples/, tests/inputs.hpp), and links
# fmt (CLI11 is header-only).
#
# The corpus starts from fuzz/TARGET.seeds/ (checked in: small inputs, crashes found earlier
# included as regression inputs) and, for gguf_file, the valid GGUF files the tests write
# (tests/test_gguf.cpp with QKERN_GGUF_SEEDS set). What the run adds stays in
# build-fuzz/TARGET.corpus/ for the next run. A finding (crash, leak, sanitizer report or broken
# contract) stops the run, fails the script and leaves the input in build-fuzz/ as
# TARGET-crash-*: add it to fuzz/TARGET.seeds/ once fixed.
#
# QKERN_FUZZ_SEED and QKERN_FUZZ_RUNS fix libFuzzer's random seed and the number of inputs tried
# (SECONDS still bounds the time): CI sets both, so that a run tries the same inputs every time
# and does not pass or fail by chance. A fixed seed alone did not do it: libFuzzer rereads the
# corpus every second (-reload, off with a seed) and some targets branch on addresses (the GGUF
# reader on a tensor's alignment), so the run is also started without address randomization where
# the system allows it (setarch -R). With both, a single-threaded target repeats itself exactly;
# kernels, whose calls share work with a thread pool, still varies a little with the threads' timing.
#
# QKERN_FUZZ_OPT is the optimization level, -O1 by default: CI builds the kernels and tool_files
# targets at -O0, where their compile (170 and 65 CPU seconds at -O1, 48 and 38 at -O0) costs more
# than running them 3 to 4 times slower for a short, fixed number of inputs. A long run wants -O1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS]}
seconds=${2:-60}
source=fuzz/$target.cpp
[[ -f $source ]] || { echo "fuzz: no $source" >&2; exit 2; }
[[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz: SECONDS must be a whole number, not '$seconds'" >&2; exit 2; }
scripts/install-deps.sh --ci # clang and its libFuzzer runtime
CXX=${CXX:-clang++}
opt=${QKERN_FUZZ_OPT:--O1}
[[ $opt =~ ^-O[0-3gs]$ ]] || { echo "fuzz: QKERN_FUZZ_OPT must be -O0, -O1, -O2, -O3, -Og or -Os, not '$opt'" >&2; exit 2; }

out=build-fuzz
corpus=$out/$target.corpus
mkdir -p "$corpus"
echo "-- building $out/$target ($CXX $opt, -fsanitize=fuzzer,address,undefined)"
"$CXX" -std=c++20 "$opt" -gline-tables-only -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Wall -Wextra -Wpedantic -Werror \
    -Iinclude -Iexamples -Itests "$source" -o "$out/$target" -lfmt

seeds=()
[[ -d fuzz/$target.seeds ]] && seeds+=("fuzz/$target.seeds")
if [[ $target == gguf_file ]]; then
    echo "-- seeds: the GGUF files tests/test_gguf.cpp writes"
    mkdir -p "$out/gguf_file.test-seeds"
    "$CXX" -std=c++20 -O0 -Iinclude -Itests -DQKERN_GOLDEN_DIR='""' tests/main.cpp tests/test_gguf.cpp -o "$out/gguf_seed_writer"
    QKERN_GGUF_SEEDS=$out/gguf_file.test-seeds "$out/gguf_seed_writer" --test-case='gguf file: a file assembled*,gguf round trip*' >/dev/null
    seeds+=("$out/gguf_file.test-seeds")
fi
echo "-- fuzzing $target for ${seconds}s from $corpus and ${seeds[*]:-no seeds}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}:halt_on_error=1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}:halt_on_error=1
fixed=()
launch=()
if [[ -n ${QKERN_FUZZ_SEED-} ]]; then
    fixed+=(-seed="$QKERN_FUZZ_SEED" -reload=0)
    if setarch "$(uname -m)" -R true 2>/dev/null; then
        launch=(setarch "$(uname -m)" -R)
    else
        echo "-- setarch -R is not allowed here: addresses stay randomized"
    fi
fi
[[ -n ${QKERN_FUZZ_RUNS-} ]] && fixed+=(-runs="$QKERN_FUZZ_RUNS")
"${launch[@]}" "$out/$target" "$corpus" "${seeds[@]}" "${fixed[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/$target-" 2>&1 | { grep -vE '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' || true; } || {
    echo "fuzz: $target found a problem; the input is in $out/ ($target-*)" >&2
    exit 1
}
