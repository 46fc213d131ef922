#!/usr/bin/env bash
# Which GPU architectures a CUDA build of the runtime carries code for: per
# CUDA object of libferry_runtime.a, the SASS (cubin, sm_XY) and PTX it
# holds, listed by cuobjdump, against the architectures the build was asked
# for (as cmake/cuda.cmake kept them from CMAKE_CUDA_ARCHITECTURES). No GPU
# needed. Exit status 1 if an architecture lacks SASS or PTX in any object.
#
#   scripts/cuda-archs.sh [BUILD]      (default: build)
#
# cuobjdump: $CUOBJDUMP, else on PATH, else beside nvcc, else NVIDIA's
# PyPI wheel (nvidia-cuda-cuobjdump) installed into BUILD/tools/cuobjdump.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
lib=$build/runtime/libferry_runtime.a
cache=$build/CMakeCache.txt
[ -f "$cache" ] || { echo "cuda-archs: $build is not a configured build folder" >&2; exit 2; }
grep -q '^FERRY_CUDA:BOOL=ON' "$cache" || { echo "cuda-archs: $build was configured with FERRY_CUDA=OFF" >&2; exit 2; }
[ -f "$lib" ] || { echo "cuda-archs: $lib not built yet (cmake --build $build)" >&2; exit 2; }

tool=${CUOBJDUMP:-}
if [ -z "$tool" ]; then tool=$(command -v cuobjdump || true); fi
if [ -z "$tool" ]; then
  cc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$cache")
  if [ -n "$cc" ] && [ -x "$(dirname "$cc")/cuobjdump" ]; then tool=$(dirname "$cc")/cuobjdump; fi
fi
if [ -z "$tool" ]; then
  target=$build/tools/cuobjdump
  if [ ! -x "$target/nvidia/cu13/bin/cuobjdump" ]; then
    echo "cuda-archs: no cuobjdump here; installing NVIDIA's from PyPI into $target"
    python3 -m pip install --quiet --no-deps --target "$target" "nvidia-cuda-cuobjdump==13.2.86"
  fi
  tool=$target/nvidia/cu13/bin/cuobjdump
  chmod +x "$tool"
fi

# The architectures asked for: numbers, "-real"/"-virtual" dropped; what
# cmake/cuda.cmake kept is in the compile definition it passes.
kept=$(grep -hoE 'FERRY_CUDA_ARCHITECTURES=\\"[^\\]*\\"' "$build/build.ninja" 2>/dev/null | head -n 1 |
       sed -E 's/.*=\\"([^\\]*)\\"/\1/' || true)
[ -n "$kept" ] || kept=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$cache")
archs=$(echo "$kept" | tr ';, ' '\n\n\n' | sed -E 's/-(real|virtual)$//' | grep -E '^[0-9]+[a-z]?$' | sort -n -u)
nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$cache")
echo "cuda-archs: $lib, built for: $(echo $archs)"
echo "cuda-archs: nvcc: $("$nvcc" --version 2>/dev/null | tail -n 1)"
echo "cuda-archs: cuobjdump: $("$tool" --version | tail -n 1)"

elf=$("$tool" --list-elf "$lib" 2>/dev/null || true)
ptx=$("$tool" --list-ptx "$lib" 2>/dev/null || true)
members=$(printf '%s\n%s\n' "$elf" "$ptx" | sed -n 's/^member .*:\([^:]*\.cu\.o\):$/\1/p' | sort -u)
[ -n "$members" ] || { echo "cuda-archs: no CUDA object in $lib" >&2; exit 1; }
# member -> its lines of the listing
lines_of() { printf '%s\n' "$1" | awk -v m="$2" '/^member /{on = index($0, ":" m ":") > 0; next} on'; }
missing=0
printf '%-16s' "object"
for a in $archs; do printf ' %-14s' "sm_$a"; done
echo
for m in $members; do
  printf '%-16s' "$m"
  for a in $archs; do
    s=no p=no
    lines_of "$elf" "$m" | grep -q "\.sm_$a\.cubin" && s=SASS
    lines_of "$ptx" "$m" | grep -q "\.sm_$a\.ptx" && p=PTX
    printf ' %-14s' "$s+$p"
    [ "$s" = SASS ] && [ "$p" = PTX ] || missing=$((missing + 1))
  done
  echo
done
if [ "$missing" -gt 0 ]; then
  echo "cuda-archs: $missing (object, architecture) pairs lack SASS or PTX" >&2
  exit 1
fi
echo "cuda-archs: every CUDA object has SASS and PTX for every architecture asked for"
