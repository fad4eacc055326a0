#!/usr/bin/env bash
# Fails on an include that goes up a layer. Layers, lowest first: kernels <- gguf <- sampling <- spec <-
# backends; a header may include its own layer and those below. Within backends, backends/gpu (the
# host code the Vulkan and Metal backends share) is backend-neutral: it includes no other folder
# of backends/. Only quoted includes between qkern's own headers are checked (the umbrella header
# qkern.hpp is above them all).
# Usage: scripts/check-layers.sh [include directory, default include/]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(cd "${1:-include}" && pwd)
layers=(kernels gguf sampling spec backends)

rank() {
    local i
    for i in "${!layers[@]}"; do
        [[ $1 == "${layers[$i]}" ]] && { echo "$i"; return; }
    done
    echo -1
}

bad=0
checked=0
while IFS= read -r -d '' file; do
    relative=${file#"$root"/}
    own=$(rank "${relative%%/*}")
    ((own >= 0)) || continue
    while IFS= read -r target; do
        # Resolve the include against the including file's folder, then name its top folder.
        resolved=$(realpath -m "$(dirname "$file")/$target")
        [[ $resolved == "$root"/* ]] || continue
        layer=${resolved#"$root"/}
        layer=${layer%%/*}
        other=$(rank "$layer")
        checked=$((checked + 1))
        if ((other > own)); then
            echo "check-layers: ${relative} includes \"$target\": $layer is above ${relative%%/*}" >&2
            bad=$((bad + 1))
        fi
        if [[ $relative == backends/gpu/* && $resolved == "$root"/backends/* && $resolved != "$root"/backends/gpu/* ]]; then
            echo "check-layers: ${relative} includes \"$target\": backends/gpu, shared by the GPU backends, includes no other part of backends/" >&2
            bad=$((bad + 1))
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find "$root" -name '*.hpp' -print0)

if ((bad > 0)); then
    echo "check-layers: $bad include(s) against the layers (${layers[*]}, lowest first; backends/gpu includes no other backend)" >&2
    exit 1
fi
echo "check-layers: $checked includes between layers checked, none goes up (${layers[*]}, lowest first)"
