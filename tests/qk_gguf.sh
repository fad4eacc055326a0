#!/usr/bin/env bash
# CTest qk_gguf: the tool on a GGUF model file. The test suite writes its test model
# (tests/test_gguf_convert.cpp, QKERN_GGUF_MODEL); qk info, quantize to every model format (with an
# importance matrix for the IQ4 formats), info on the result, and dequantize must succeed and say
# what they did; bad files must fail with status 1 and arguments that contradict the file with
# status 2 (a usage error), each with a message naming the problem, and no output file. The bytes themselves are checked in test_gguf_convert.cpp.
# Usage: tests/qk_gguf.sh QK QKERN_TESTS
set -euo pipefail
qk=$1
tests=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

check() { # check DESCRIPTION COMMAND...: the command succeeds
    if ! "${@:2}" >"$dir/out" 2>"$dir/err"; then
        echo "FAIL: $1: status $?" >&2
        cat "$dir/out" "$dir/err" >&2
        exit 1
    fi
}
expect_status() { # expect_status STATUS DESCRIPTION TEXT OUTPUT COMMAND...: STATUS, TEXT on stderr, no OUTPUT
    local status=0
    "${@:5}" >"$dir/out" 2>"$dir/err" || status=$?
    if ((status != $1)) || ! grep -qF -- "$3" "$dir/err" || [[ -e $4 ]]; then
        echo "FAIL: $2: status $status (expected $1), stderr:" >&2
        cat "$dir/err" >&2
        [[ -e $4 ]] && echo "and $4 was written" >&2
        exit 1
    fi
}
expect_error() { expect_status 1 "$@"; }       # a bad file
expect_usage_error() { expect_status 2 "$@"; } # options that do not fit the file
contains() { # contains DESCRIPTION FILE TEXT
    grep -qF -- "$3" "$2" || {
        echo "FAIL: $1: no '$3' in:" >&2
        cat "$2" >&2
        exit 1
    }
}

QKERN_GGUF_MODEL=$dir/model.gguf "$tests" --test-case="gguf quantize: llama.cpp*" >/dev/null
check "qk info on the test model" "$qk" info "$dir/model.gguf"
contains "qk info lists the tensors" "$dir/out" "blk.0.ffn_up_exps.weight"

# An importance matrix for the two matrices it names, in llama-imatrix's legacy form (written
# here byte by byte; the GGUF form is read in the test suite).
imatrix=$dir/imatrix.dat
{
    printf '\x01\x00\x00\x00'                       # one entry
    printf '\x13\x00\x00\x00blk.0.attn_q.weight'    # its name (19 bytes)
    printf '\x07\x00\x00\x00\x00\x02\x00\x00'       # 7 calls, 512 values
    for ((i = 0; i < 512; ++i)); do printf '\x00\x00\x80\x3f'; done # 1.0f each
} >"$imatrix"

for type in q8_0 mxfp4 iq4_nl iq4_xs nvfp4; do
    args=()
    [[ $type == iq4_* ]] && args=(--imatrix "$imatrix")
    check "qk quantize --type $type" "$qk" quantize "$dir/model.gguf" "$dir/$type.gguf" --type "$type" --threads 2 "${args[@]}"
    contains "qk quantize --type $type reports" "$dir/out" "to '$dir/$type.gguf'"
    contains "qk quantize --type $type shows progress" "$dir/err" "blk.0.attn_q.weight"
    check "qk info on the $type file" "$qk" info "$dir/$type.gguf"
    contains "the $type file holds $type weights" "$dir/out" "$type "
    check "qk dequantize the $type file" "$qk" dequantize "$dir/$type.gguf" "$dir/$type-f32.gguf"
    contains "qk dequantize reports" "$dir/out" "dequantized to F32"
done
contains "IQ4_XS's fallback is reported" <("$qk" quantize "$dir/model.gguf" "$dir/again.gguf" --type iq4_xs 2>/dev/null) \
    "IQ4_NL instead"

expect_error "Q8_K is no model format" "activation format" "$dir/q8k.gguf" \
    "$qk" quantize "$dir/model.gguf" "$dir/q8k.gguf" --type q8_k
expect_usage_error "--cols with a GGUF file" "is a GGUF file" "$dir/cols.gguf" \
    "$qk" quantize "$dir/model.gguf" "$dir/cols.gguf" --type q8_0 --cols 32
expect_usage_error "--type with a GGUF dequantize" "is a GGUF file" "$dir/typed.gguf" \
    "$qk" dequantize "$dir/q8_0.gguf" "$dir/typed.gguf" --type q8_0
expect_error "a missing input" "cannot open" "$dir/missing-out.gguf" \
    "$qk" quantize "$dir/missing.gguf" "$dir/missing-out.gguf" --type q8_0
head -c 1000 "$dir/model.gguf" >"$dir/cut.gguf"
expect_error "a truncated model" "qk::gguf::file" "$dir/cut-out.gguf" \
    "$qk" quantize "$dir/cut.gguf" "$dir/cut-out.gguf" --type q8_0
expect_error "a missing importance matrix" "cannot open" "$dir/no-imatrix.gguf" \
    "$qk" quantize "$dir/model.gguf" "$dir/no-imatrix.gguf" --type iq4_xs --imatrix "$dir/nothing.dat"
printf '\x01\x00\x00\x00\x13\x00\x00\x00blk.0.attn_q.weight\x01\x00\x00\x00\x00\x01\x00\x00' >"$dir/short.dat"
for ((i = 0; i < 256; ++i)); do printf '\x00\x00\x80\x3f'; done >>"$dir/short.dat"
expect_error "an importance matrix of the wrong size" "has 256 weights for 'blk.0.attn_q.weight', which needs 512" "$dir/short.gguf" \
    "$qk" quantize "$dir/model.gguf" "$dir/short.gguf" --type iq4_nl --imatrix "$dir/short.dat"
expect_usage_error "a raw file without --cols" "needs --type and --cols" "$dir/raw.out" \
    "$qk" quantize "$imatrix" "$dir/raw.out" --type q8_0
leftover=$(find "$dir" -name '*.tmp-*')
[[ -z $leftover ]] || { echo "FAIL: temporary files left behind: $leftover" >&2; exit 1; }
echo "qk_gguf: every check passed"
