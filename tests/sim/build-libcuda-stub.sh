#!/bin/bash
# Build the libcuda.so.1 stand-in of simulated NVIDIA nodes: tests/sim/build/libcuda.so.1
# (or OUTDIR/libcuda.so.1). Needs gcc on the controller (same glibc generation as the bookworm
# nodes). Rebuilds only when the source changed. install-accelsim.sh installs it when present.
#   tests/sim/build-libcuda-stub.sh [OUTDIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/libcuda_stub.c"
outdir="${1:-$here/build}"
out="$outdir/libcuda.so.1"
if [[ -f "$out" && "$out" -nt "$src" && "$out" -nt "${BASH_SOURCE[0]}" ]]; then
    echo "$out is up to date"
    exit 0
fi
cc="${CC:-gcc}"
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "build-libcuda-stub: $cc not found; install gcc (apt-get install gcc) or set CC" >&2
    exit 1
fi
mkdir -p "$outdir"
"$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -Wall -Wextra -Werror -fPIC -shared \
    -Wl,-soname,libcuda.so.1 -o "$out.tmp" "$src"
mv "$out.tmp" "$out"
echo "built $out"
