#!/usr/bin/env bash
# CTest qk_cli: what the tool promises on its command line, checked by exit status and message.
#  - exit status: 0 on success (--help, --version included), 1 on an error (a missing file, an
#    output that cannot be written), 2 on a usage error; every message starts with 'qk:', and
#    every --help ends with the rule;
#  - quantize and dequantize, raw and GGUF, refuse an output that is their input (the same path, a
#    symbolic link, a hard link), leaving it as it was, and an existing output that is not a
#    regular file (a fifo, a link to a device), leaving it in place;
#  - qk sample: a seed written in the chain wins over the default, an explicit --seed that differs
#    from it is a usage error, and --seed -1 draws a seed and prints it so that the run repeats;
#  - qk spec warns when --n and --m, or the input's length, rule drafting out, and only then (the
#    inputs here sit one token on either side of each rule's bound).
# Needs no root, writes only inside its temporary directory. Usage: tests/qk_cli.sh QK
set -euo pipefail
qk=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() { # fail MESSAGE: report with the last command's output, and stop
    echo "FAIL: $1" >&2
    echo "--- stdout:" >&2
    cat "$dir/out" >&2
    echo "--- stderr:" >&2
    cat "$dir/err" >&2
    exit 1
}
run() { # run COMMAND...: its status in $status, its output in $dir/out and $dir/err
    status=0
    "$@" >"$dir/out" 2>"$dir/err" || status=$?
}
expect() { # expect DESCRIPTION STATUS TEXT COMMAND...: that status, and TEXT on stderr (any, if empty)
    run "${@:4}"
    ((status == $2)) || fail "$1: status $status, expected $2"
    [[ -z $3 ]] || grep -qF -- "$3" "$dir/err" || fail "$1: no '$3' on stderr"
    if (($2 != 0)); then
        # The first line is the message, prefixed; nothing goes to stdout before a usage error.
        head -n 1 "$dir/err" | grep -q '^qk: ' || fail "$1: the message does not start with 'qk: '"
    fi
}
expect_usage() { # expect_usage DESCRIPTION TEXT COMMAND...: status 2, TEXT, and the hint to --help
    expect "$1" 2 "$2" "${@:3}"
    grep -qF -- "--help" "$dir/err" || fail "$1: no hint to --help"
}
contains() { # contains DESCRIPTION FILE TEXT
    grep -qF -- "$3" "$2" || fail "$1: no '$3' in $2"
}
lacks() { # lacks DESCRIPTION FILE TEXT
    ! grep -qF -- "$3" "$2" || fail "$1: '$3' in $2"
}

# ---------------------------------------------------------------------------------------------
# Inputs: 2 rows of 32 floats (raw), and a GGUF file with one 32 x 2 F32 matrix, written byte by
# byte (GGUF 3, no metadata, the data at the default alignment of 32).
floats=$dir/x.f32
for ((i = 0; i < 32; ++i)); do printf '\x00\x00\x80\x3f\x00\x00\x00\xc0'; done >"$floats" # 1.0, -2.0
model=$dir/model.gguf
{
    printf 'GGUF\x03\x00\x00\x00'
    printf '\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' # 1 tensor, 0 keys
    printf '\x0e\x00\x00\x00\x00\x00\x00\x00blk.0.w.weight'                   # its name (14 bytes)
    printf '\x02\x00\x00\x00\x20\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00' # 2 dims: 32, 2
    printf '\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'                 # F32, offset 0
    printf '\x00%.0s' {1..18}                                                 # 78 bytes so far: pad to 96
    cat "$floats"
} >"$model"

# Both forms work on these inputs, so that each refusal below is the refusal and not a bad input.
expect "raw quantize" 0 "" "$qk" quantize -t q8_0 -c 32 "$floats" "$dir/w.q8_0"
expect "raw dequantize" 0 "" "$qk" dequantize -t q8_0 -c 32 "$dir/w.q8_0" "$dir/back.f32"
expect "GGUF quantize" 0 "" "$qk" quantize "$model" "$dir/w.gguf" --type q8_0 --threads 1
contains "GGUF quantize converts the matrix" "$dir/out" "1 of them converted"
expect "GGUF dequantize" 0 "" "$qk" dequantize "$dir/w.gguf" "$dir/back.gguf" --threads 1

# ---------------------------------------------------------------------------------------------
# An output that is the input: refused as a usage error before anything is written.
ln -s "$dir/w.q8_0" "$dir/symlink.q8_0"
ln "$dir/w.q8_0" "$dir/hardlink.q8_0"
ln -s "$dir/w.gguf" "$dir/symlink.gguf"
ln "$dir/w.gguf" "$dir/hardlink.gguf"
ln -s "$floats" "$dir/symlink.f32"
raw_sum=$(cksum <"$dir/w.q8_0")
gguf_sum=$(cksum <"$dir/w.gguf")
floats_sum=$(cksum <"$floats")
for out in "$dir/w.q8_0" "$dir/symlink.q8_0" "$dir/hardlink.q8_0"; do
    expect_usage "raw dequantize over its input ${out##*/}" "is the input" \
        "$qk" dequantize -t q8_0 -c 32 "$dir/w.q8_0" "$out"
done
for out in "$floats" "$dir/symlink.f32"; do
    expect_usage "raw quantize over its input ${out##*/}" "is the input" "$qk" quantize -t q8_0 -c 32 "$floats" "$out"
done
for out in "$dir/w.gguf" "$dir/symlink.gguf" "$dir/hardlink.gguf"; do
    expect_usage "GGUF dequantize over its input ${out##*/}" "is the input" "$qk" dequantize "$dir/w.gguf" "$out"
done
expect_usage "GGUF quantize over its input" "is the input" "$qk" quantize "$dir/w.gguf" "$dir/hardlink.gguf" --type q8_0
[[ $(cksum <"$dir/w.q8_0") == "$raw_sum" ]] || fail "the raw input was changed"
[[ $(cksum <"$dir/w.gguf") == "$gguf_sum" ]] || fail "the GGUF input was changed"
[[ $(cksum <"$floats") == "$floats_sum" ]] || fail "the float input was changed"
[[ -L $dir/symlink.q8_0 && -L $dir/symlink.gguf && -L $dir/symlink.f32 ]] || fail "a link to the input was replaced"

# An existing output that is not a regular file: refused (status 1, a file-system matter), and
# left in place. The device is reached through a link in this directory, so that a tool that
# renamed over it would replace the link, not the device.
mkfifo "$dir/fifo"
ln -s /dev/null "$dir/device"
mkdir "$dir/directory"
for out in fifo device directory; do
    expect "raw quantize to a $out" 1 "is not a regular file" "$qk" quantize -t q8_0 -c 32 "$floats" "$dir/$out"
    expect "raw dequantize to a $out" 1 "is not a regular file" "$qk" dequantize -t q8_0 -c 32 "$dir/w.q8_0" "$dir/$out"
    expect "GGUF quantize to a $out" 1 "is not a regular file" "$qk" quantize "$model" "$dir/$out" --type q8_0
    expect "GGUF dequantize to a $out" 1 "is not a regular file" "$qk" dequantize "$dir/w.gguf" "$dir/$out"
done
[[ -p $dir/fifo ]] || fail "the fifo was replaced"
[[ -L $dir/device && -c $dir/device ]] || fail "the link to /dev/null was replaced"
[[ -d $dir/directory ]] || fail "the directory was replaced"
leftover=$(find "$dir" -name '*.tmp-*')
[[ -z $leftover ]] || fail "temporary files left behind: $leftover"

# The GGUF form takes its types from the file: a raw --type with a GGUF input is refused.
expect_usage "dequantize --type with a GGUF input" "is a GGUF file" "$qk" dequantize "$dir/w.gguf" "$dir/typed.gguf" --type q8_0
[[ ! -e $dir/typed.gguf ]] || fail "dequantize --type with a GGUF input wrote its output"

# ---------------------------------------------------------------------------------------------
# qk sample's seeds. The first line of the output is the tokens.
# tokens ARGS...: the tokens qk sample draws with these arguments. Each call is assigned on its
# own, so that set -e stops the script when one fails.
tokens() {
    expect "qk sample $*" 0 "" "$qk" sample --vocab 2000 --n 24 "$@"
    head -n 1 "$dir/out"
}
seed_7=$(tokens --chain "top_k(200);temp(1.5);dist" --seed 7)
seed_42=$(tokens --chain "top_k(200);temp(1.5);dist")
[[ $seed_7 != "$seed_42" ]] || fail "seeds 7 and 42 draw the same tokens: the checks below would prove nothing"
chain_7=$(tokens --chain "top_k(200);temp(1.5);dist(seed=7)")
[[ $chain_7 == "$seed_7" ]] || fail "the chain's dist(seed=7) did not win over the default seed"
positional_7=$(tokens --chain "top_k(200);temp(1.5);dist(7)")
[[ $positional_7 == "$seed_7" ]] || fail "the chain's positional dist(7) did not win over the default seed"
agreeing_7=$(tokens --chain "top_k(200);temp(1.5);dist(seed=7)" --seed 7)
[[ $agreeing_7 == "$seed_7" ]] || fail "an agreeing --seed changed the draw"
expect_usage "a --seed that conflicts with the chain's" "dist(seed=7)" \
    "$qk" sample --vocab 2000 --chain "top_k(200);temp(1.5);dist(seed=7)" --seed 9
contains "the conflict names --seed" "$dir/err" "--seed 9"
expect_usage "--seed -1 with a chain that gives its seed" "dist(seed=7)" \
    "$qk" sample --vocab 2000 --chain "top_k(200);temp(1.5);dist(seed=7)" --seed -1
random=$(tokens --chain "top_k(200);temp(1.5);dist" --seed -1)
drawn=$(sed -n 's/.*the random seed is \([0-9][0-9]*\).*/\1/p' "$dir/err")
[[ -n $drawn ]] || fail "--seed -1 printed no seed"
repeated=$(tokens --chain "top_k(200);temp(1.5);dist" --seed "$drawn")
[[ $repeated == "$random" ]] || fail "--seed $drawn did not repeat the --seed -1 run"
expect_usage "--seed -2" "-1 for a random seed" "$qk" sample --seed -2
expect_usage "--seed 2^64" "-1 for a random seed" "$qk" sample --seed 18446744073709551616

# ---------------------------------------------------------------------------------------------
# Exit status and messages across the subcommands.
expect_usage "an unknown subcommand" "frobnicate" "$qk" frobnicate
expect_usage "quantize --cols -32" "--cols" "$qk" quantize -t q8_0 -c -32 "$floats" "$dir/o"
expect_usage "quantize --cols 31" "not a multiple" "$qk" quantize -t q8_0 -c 31 "$floats" "$dir/o"
expect_usage "quantize --type q9" "unknown format" "$qk" quantize -t q9 -c 32 "$floats" "$dir/o"
expect_usage "a raw file without --cols" "needs --type and --cols" "$qk" quantize -t q8_0 "$floats" "$dir/o"
expect_usage "dequantize without an output" "output" "$qk" dequantize "$dir/w.q8_0"
expect_usage "solve --n -5" "--n -5" "$qk" solve --n -5
expect_usage "sample --backend foo" "--backend 'foo'" "$qk" sample --backend foo
expect_usage "a chain that selects nothing" "--chain" "$qk" sample --chain "top_k(40)"
expect_usage "spec --n 0" "--n" "$qk" spec --n 0
expect_usage "bench --backend foo" "--backend 'foo'" "$qk" bench --backend foo
expect_usage "info with an unknown option" "--frobnicate" "$qk" info --frobnicate
[[ ! -e $dir/o ]] || fail "a usage error wrote its output"
expect "quantize a missing file" 1 "qk: error: cannot open" "$qk" quantize -t q8_0 -c 32 "$dir/missing.f32" "$dir/o"
expect "spec on a missing file" 1 "qk: error: cannot open" "$qk" spec "$dir/missing.txt"
expect "info on a file that is not GGUF" 1 "qk: error:" "$qk" info "$floats"
expect "qk --version" 0 "" "$qk" --version
contains "qk --version prints the version" "$dir/out" "qk "
expect "qk --help" 0 "" "$qk" --help
contains "qk --help states the exit status" "$dir/out" "Exit status: 0 on success, 1 on an error"
for sub in tour info quantize bench solve sample spec dequantize; do
    expect "qk $sub --help" 0 "" "$qk" "$sub" --help
    contains "qk $sub --help states the exit status" "$dir/out" "Exit status: 0 on success, 1 on an error"
    contains "qk $sub --help states the exit status" "$dir/out" "2 on a usage error"
done
expect "quantize --help" 0 "" "$qk" quantize --help
contains "quantize --help says a raw file has no header" "$dir/out" "Raw files have no header"
expect "dequantize --help" 0 "" "$qk" dequantize --help
contains "dequantize --help says a raw file's type cannot be checked" "$dir/out" "the type cannot be checked"

# ---------------------------------------------------------------------------------------------
# qk spec: the warnings, with the numbers, only where drafting is ruled out.
drafts() { # drafts DRAFTER: the drafts column of the last qk spec run's row for DRAFTER
    awk -v name="$1" 'index($0, name " ") == 1 { print $(NF - 1) }' "$dir/out"
}
expect "spec on the built-in sample" 0 "" "$qk" spec
lacks "spec at its defaults warns of nothing" "$dir/err" "warning"
expect "spec --n 64 --m 4" 0 "qk: warning: --m 4 is below --n 64" "$qk" spec --n 64 --m 4
contains "the warning names the drafters" "$dir/err" "ngram_simple and ngram_index never draft"
[[ $(drafts ngram_simple) == 0 ]] || fail "ngram_simple drafted with m < n"
printf 'abcabcabcabc' >"$dir/short.txt"
expect "spec on 12 tokens" 0 "qk: warning: '$dir/short.txt' (bytes as tokens) holds 12 tokens" "$qk" spec "$dir/short.txt"
contains "the short input's warning says why" "$dir/err" "nothing is drafted"
# ngram_simple at n = m = 16 looks from a history of n + m + 2 = 34: 16 distinct tokens, two
# others, the 16 again, then one or two more tokens: the 16 repeat at history 34, so a draft made
# there is checked when a token follows the sampled one (37 tokens), and not with 36.
pattern="100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115"
echo "99 $pattern 7 8 $pattern 1" >"$dir/36.ids"
echo "99 $pattern 7 8 $pattern 1 2" >"$dir/37.ids"
expect "spec on 36 ids" 0 "ngram_simple and ngram_index n + m + 2 = 34" "$qk" spec "$dir/36.ids" --ids --n 16 --m 16
[[ $(drafts ngram_simple) == 0 ]] || fail "ngram_simple drafted where the warning says it cannot"
expect "spec on 37 ids" 0 "" "$qk" spec "$dir/37.ids" --ids --n 16 --m 16
lacks "spec on 37 ids does not warn" "$dir/err" "warning"
[[ $(drafts ngram_simple) -ge 1 ]] || fail "ngram_simple did not draft at history n + m + 2"
# ngram_map at n = 20, m = 16 needs n + m = 36: a sequence of period 17 repeats its first 20
# tokens at history 36.
seq_mod() { for ((i = 0; i < $1; ++i)); do printf '%d ' $((i % $2)); done; }
seq_mod 38 17 >"$dir/38.ids"
seq_mod 39 17 >"$dir/39.ids"
expect "spec on 38 ids" 0 "ngram_map (both modes) n + m = 36" "$qk" spec "$dir/38.ids" --ids --n 20 --m 16
[[ $(drafts "ngram_map (values)") == 0 ]] || fail "ngram_map drafted where the warning says it cannot"
expect "spec on 39 ids" 0 "" "$qk" spec "$dir/39.ids" --ids --n 20 --m 16
lacks "spec on 39 ids warns only of m < n" "$dir/err" "ngram_map"
[[ $(drafts "ngram_map (values)") -ge 1 ]] || fail "ngram_map did not draft at history n + m"
# ngram_mod fills its pool past add_chunk (32) tokens of history: period 2 repeats at once.
seq_mod 35 2 >"$dir/35.ids"
seq_mod 36 2 >"$dir/36b.ids"
expect "spec on 35 ids" 0 "ngram_mod (n, m) max(n + 1, 33) = 33" "$qk" spec "$dir/35.ids" --ids --n 4 --m 4
[[ $(drafts "ngram_mod (n, m)") == 0 ]] || fail "ngram_mod drafted where the warning says it cannot"
expect "spec on 36 ids" 0 "" "$qk" spec "$dir/36b.ids" --ids --n 4 --m 4
lacks "spec on 36 ids does not warn" "$dir/err" "warning"
[[ $(drafts "ngram_mod (n, m)") -ge 1 ]] || fail "ngram_mod did not draft at history 33"

# ---------------------------------------------------------------------------------------------
# qk quantize of a raw file on several threads writes the one-thread bytes. The input is a
# Fibonacci word of two different 64-float rows (s(n) = s(n-1) s(n-2)): no period, so a block
# written to another block's place shows; 660 KB, three of the pool's 64 K-value tasks.
printf '\x00\x00\x00\x3f\x00\x00\x40\x40%.0s' {1..32} >"$dir/fib.0" # 0.5, 3.0
cp "$floats" "$dir/fib.1"
for ((n = 2; n <= 17; ++n)); do cat "$dir/fib.$((n - 1))" "$dir/fib.$((n - 2))" >"$dir/fib.$n"; done
for type in q8_0 iq4_xs; do
    expect "raw quantize --type $type, 1 thread" 0 "" "$qk" quantize -t $type -c 256 "$dir/fib.17" "$dir/fib.1t" --threads 1
    expect "raw quantize --type $type, 3 threads" 0 "" "$qk" quantize -t $type -c 256 "$dir/fib.17" "$dir/fib.3t" --threads 3
    cmp -s "$dir/fib.1t" "$dir/fib.3t" || fail "raw quantize --type $type: 3 threads wrote other bytes than 1"
done

echo "qk_cli: every check passed"
