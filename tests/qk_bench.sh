#!/usr/bin/env bash
# CTest qk_bench: qk bench's command line, its JSON and its progress, on the shortest settings (one
# kernel bench and one bench of the test model; the figures themselves are not checked). --json to
# a path that cannot be written fails before any benchmark runs; --repetitions 0 is a usage error;
# --help shows the defaults, the columns' legend and the JSON schema; the JSON of both benches
# holds schema qkern-bench version 1 with every field README.md lists (checked with python3, else
# jq, else grep); stderr holds no carriage return when it is not a terminal, and does when
# QK_PROGRESS=terminal says it is.
# Usage: tests/qk_bench.sh QK QKERN_TESTS
set -euo pipefail
qk=$1
tests=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The user's own QK_PROGRESS would change what stderr holds.
unset QK_PROGRESS

fail() {
    echo "FAIL: $1" >&2
    for f in "${@:2}"; do
        echo "--- $f:" >&2
        cat "$f" >&2
    done
    exit 1
}
check() { # check DESCRIPTION COMMAND...: the command succeeds
    "${@:2}" >"$dir/out" 2>"$dir/err" || fail "$1: status $?" "$dir/out" "$dir/err"
}
contains() { # contains DESCRIPTION FILE TEXT
    grep -qF -- "$3" "$2" || fail "$1: no '$3'" "$2"
}
no_carriage_return() { # no_carriage_return DESCRIPTION FILE
    if grep -q $'\r' "$2"; then
        fail "$1: a carriage return in" "$2"
    fi
}

# --- Refusals, before any work: nothing on stdout (print_info() would be the first line). Not
# timed: a loaded or instrumented CI machine must not make this flaky.
mkdir "$dir/json"
for target in "$dir/json/missing/x.json" "$dir/json"; do
    status=0
    "$qk" bench --seconds 0.001 --threads 1 --json "$target" >"$dir/out" 2>"$dir/err" || status=$?
    ((status == 1)) || fail "bench --json $target: status $status (expected 1)" "$dir/out" "$dir/err"
    [[ ! -s $dir/out ]] || fail "bench --json $target ran before refusing" "$dir/out"
    contains "bench --json $target names the file" "$dir/err" "$target"
done
[[ -z $(ls "$dir/json") ]] || fail "a refused --json left a file behind: $(ls "$dir/json")"

status=0
"$qk" bench --repetitions 0 >"$dir/out" 2>"$dir/err" || status=$?
((status == 2)) || fail "bench --repetitions 0: status $status (expected 2, a usage error)" "$dir/out" "$dir/err"
contains "--repetitions 0 is named" "$dir/err" "--repetitions"
[[ ! -s $dir/out ]] || fail "bench --repetitions 0 ran" "$dir/out"

# --- Help: defaults, legend, schema.
check "bench --help" "$qk" bench --help
grep -qE -- '--seconds .*=0\.05' "$dir/out" || fail "--help shows no default for --seconds" "$dir/out"
grep -qE -- '--threads .*=\[1,2\]' "$dir/out" || fail "--help shows no default for --threads" "$dir/out"
grep -qE -- '--repetitions .*=1' "$dir/out" || fail "--help shows no default for --repetitions" "$dir/out"
contains "--help explains ns/32" "$dir/out" "ns/32     the same per 32 weights"
contains "--help explains % of bw" "$dir/out" "% of bw   a mat-vec's GB/s"
contains "--help gives the JSON schema" "$dir/out" '"schema": "qkern-bench", "version": 1'

# --- The kernel bench, with stderr a file: no carriage return, one final line; the legend under the table.
check "bench" "$qk" bench --seconds 0.001 --threads 1 --json "$dir/kernels.json"
no_carriage_return "bench's stderr in a file" "$dir/err"
contains "bench's stderr ends with a summary" "$dir/err" "qk bench: "
contains "the legend follows the table" "$dir/out" "GB/s      weight bytes read per second"
[[ -z $(find "$dir" -name '*.tmp-*') ]] || fail "a temporary file was left behind: $(find "$dir" -name '*.tmp-*')"

# --- The model bench, repeated, its progress drawn as on a terminal: carriage returns there.
QKERN_GGUF_MODEL=$dir/model.gguf "$tests" --test-case="gguf quantize: llama.cpp*" >/dev/null
check "quantize the test model" "$qk" quantize "$dir/model.gguf" "$dir/q8_0.gguf" --type q8_0 --threads 1
QK_PROGRESS=terminal check "bench FILE.gguf" "$qk" bench "$dir/q8_0.gguf" --threads 1 --seconds 0.001 --repetitions 2 \
    --json "$dir/model.json"
grep -q $'\r' "$dir/err" || fail "QK_PROGRESS=terminal drew no progress line (so the check above could not fail)" "$dir/err"
contains "the table shows the spread over the repetitions" "$dir/out" " ± "

# --- The JSON against the schema.
if command -v python3 >/dev/null; then
    python3 - "$dir/kernels.json" "$dir/model.json" "$dir/q8_0.gguf" <<'EOF'
import json, sys

def fail(message):
    sys.exit(f"FAIL: JSON: {message}")

def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)

# Fields an entry of each op had before the schema (readers use them) and keeps.
kept = {
    ("kernels", "read"): ["threads", "gb_per_s"],
    ("kernels", "dot"): ["format", "arch", "threads", "ns_per_block", "ns_per_32", "gb_per_s"],
    ("kernels", "gemv"): ["format", "arch", "threads", "ns_per_block", "ns_per_32", "gb_per_s", "bandwidth_fraction"],
    ("kernels", "gemm"): ["format", "arch", "threads", "ns_per_block", "ns_per_32", "gflops"],
    ("model", "read"): ["threads", "gb_per_s"],
    ("model", "gemv"): ["format", "arch", "threads", "tensors", "rows", "cols", "bytes", "ns_per_call", "ns_per_block", "ns_per_32",
                        "gb_per_s", "bandwidth_fraction", "may_be_cached"],
    ("model", "model"): ["arch", "threads", "tensors", "bytes", "seconds", "gb_per_s", "bandwidth_fraction", "tokens_per_s",
                         "bandwidth_tokens_per_s", "may_be_cached"],
}

for path, kind, repetitions in [(sys.argv[1], "kernels", 1), (sys.argv[2], "model", 2)]:
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != "qkern-bench" or doc.get("version") != 1 or isinstance(doc.get("version"), bool):
        fail(f"{path}: schema {doc.get('schema')!r} version {doc.get('version')!r}")
    if not isinstance(doc.get("qkern_version"), str) or doc["qkern_version"].count(".") != 2:
        fail(f"{path}: qkern_version {doc.get('qkern_version')!r}")
    compiler = doc.get("compiler", {})
    if not all(isinstance(compiler.get(k), str) and compiler[k] for k in ("name", "version")):
        fail(f"{path}: compiler {compiler!r}")
    build = doc.get("build", {})
    if not isinstance(build.get("native_tag"), str) or not isinstance(build.get("kernels"), str) or not isinstance(build.get("flags_enable"), list):
        fail(f"{path}: build {build!r}")
    cpu = doc.get("cpu", {})
    if not isinstance(cpu.get("model"), str) or not cpu["model"] or not isinstance(cpu.get("features"), list) \
            or not all(isinstance(x, str) for x in cpu["features"]):
        fail(f"{path}: cpu {cpu!r}")
    if doc.get("repetitions") != repetitions or doc.get("backend") != "cpu" or not number(doc.get("seconds")):
        fail(f"{path}: repetitions {doc.get('repetitions')!r}, backend {doc.get('backend')!r}, seconds {doc.get('seconds')!r}")
    if kind == "model" and doc.get("model") != sys.argv[3]:
        fail(f"{path}: model {doc.get('model')!r}")
    results = doc.get("results")
    if not isinstance(results, list) or not results:
        fail(f"{path}: no results")
    ops = set()
    for r in results:
        op = r.get("op")
        ops.add(op)
        if (kind, op) not in kept:
            fail(f"{path}: op {op!r}")
        missing = [k for k in kept[(kind, op)] + ["device", "shape", "measure", "mean", "stddev", "min", "max"] if k not in r]
        if missing:
            fail(f"{path}: {op} lacks {missing}: {r}")
        if not isinstance(r["threads"], int) or r["threads"] != 1 or r["device"] is not False:
            fail(f"{path}: threads/device {r}")
        if not isinstance(r["shape"], list) or not all(isinstance(n, int) and n > 0 for n in r["shape"]):
            fail(f"{path}: shape {r}")
        if not all(number(r[k]) for k in ("mean", "stddev", "min", "max")):
            fail(f"{path}: statistics {r}")
        if not (r["min"] <= r["mean"] * (1 + 1e-5) and r["mean"] <= r["max"] * (1 + 1e-5) and r["stddev"] >= 0):
            fail(f"{path}: min <= mean <= max, stddev >= 0: {r}")
        if repetitions == 1 and r["stddev"] != 0:
            fail(f"{path}: one repetition has no spread: {r}")
        if not number(r.get(r["measure"])) or abs(r[r["measure"]] - r["mean"]) > 1e-3 * abs(r["mean"]) + 1e-4:
            fail(f"{path}: the mean is not the figure {r['measure']!r} names: {r}")
    expected = {"read", "dot", "gemv", "gemm"} if kind == "kernels" else {"read", "gemv", "model"}
    if ops != expected:
        fail(f"{path}: ops {sorted(ops)}, expected {sorted(expected)}")
EOF
elif command -v jq >/dev/null; then
    for file in kernels model; do
        reps=1
        [[ $file == model ]] && reps=2
        jq -e --argjson reps "$reps" '
            .schema == "qkern-bench" and .version == 1 and (.qkern_version | type) == "string"
            and (.compiler.name | type) == "string" and (.compiler.version | type) == "string"
            and (.build.native_tag | type) == "string" and (.build.flags_enable | type) == "array"
            and (.cpu.model | type) == "string" and (.cpu.features | type) == "array"
            and .repetitions == $reps and (.results | length) > 0
            and all(.results[]; (.op | type) == "string" and .threads == 1 and .device == false
                and (.shape | type) == "array" and (.gb_per_s != null or .ns_per_32 != null or .seconds != null)
                and ([.mean, .stddev, .min, .max] | all(type == "number")) and .min <= .mean and .mean <= .max
                and (.[.measure] | type) == "number")' "$dir/$file.json" >/dev/null ||
            fail "$file.json does not follow the schema" "$dir/$file.json"
    done
else
    for file in kernels model; do
        for field in '"schema": "qkern-bench"' '"version": 1,' '"qkern_version"' '"compiler"' '"build"' '"cpu"' '"features"' \
            '"repetitions"' '"results"' '"shape"' '"measure"' '"mean"' '"stddev"' '"min"' '"max"' '"gb_per_s"'; do
            contains "$file.json" "$dir/$file.json" "$field"
        done
    done
fi
echo "qk bench: refusals, help, JSON schema and progress checked"
