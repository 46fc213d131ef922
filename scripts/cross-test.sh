#!/usr/bin/env bash
# Cross-compiled test runs: builds the runtime, the ferry CLI and the whole
# test suite for a 64-bit or 32-bit Arm Linux target with Debian's cross
# compilers, and runs the suite under qemu-user, then `ferry selftest` on a
# set of converted fixtures with every backend the build has.
#
#   scripts/cross-test.sh aarch64|armv7 [BUILD_DIR]     (default build-<arch>)
#
# What it builds is whatever the tree has: the reference kernels, the NEON
# kernels of the SIMD backend, XNNPACK where Debian packages it for the
# architecture (arm64 and armhf both). Steps:
#   1. install-deps.sh with the `cross` group (compilers, qemu-user, ...);
#   2. a private sysroot, BUILD_DIR/sysroot, with the target's XNNPACK,
#      pthreadpool and cpuinfo (and libcrypto, zlib for the converter):
#      `apt-get download pkg:<arch>` + `dpkg -x`.
#      Never `apt-get install` them: Debian's XNNPACK and pthreadpool are not
#      multi-arch co-installable, installing the foreign ones removes the
#      host's (and everything built on them);
#   3. GoogleTest from /usr/src/googletest, built for the target into the
#      sysroot;
#   4. ferry with targets/<triple>.cmake; ctest runs every test under qemu
#      (CMAKE_CROSSCOMPILING_EMULATOR; the e2e tests reach the CLI through
#      a wrapper script, see cmake/emulator.cmake). No binfmt_misc needed.
# Steps 2 and 3 are skipped when already done for the same package versions.
#
# Environment: FERRY_JOBS (build jobs, default 2), FERRY_SKIP_DEPS=1 (do not
# run install-deps.sh), FERRY_CTEST_ARGS (extra ctest arguments),
# FERRY_QEMU_SKIP (the tests left out under qemu, a ctest -E regex; see 4.),
# FERRY_CROSS_PACKAGES (more target packages for the sysroot).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() { echo "usage: scripts/cross-test.sh aarch64|armv7 [BUILD_DIR]" >&2; exit 2; }
[ $# -ge 1 ] || usage
arch=$1
case "$arch" in
  aarch64) triple=aarch64-linux-gnu deb_arch=arm64 qemu=qemu-aarch64 ;;
  armv7) triple=arm-linux-gnueabihf deb_arch=armhf qemu=qemu-arm ;;
  *) usage ;;
esac
build=$(realpath -m "${2:-build-$arch}")
sysroot=$build/sysroot
jobs=${FERRY_JOBS:-2}
started=$(date +%s)
say() { printf 'cross-test %s [%4ss]: %s\n' "$arch" "$(( $(date +%s) - started ))" "$*"; }

# 1. Host packages.
if [ "${FERRY_SKIP_DEPS:-0}" != 1 ]; then
  FERRY_DEPS="cross ${FERRY_DEPS:-}" scripts/install-deps.sh
fi
for tool in "$triple-g++" "$qemu" cmake ninja flatc; do
  command -v "$tool" >/dev/null || { echo "cross-test: '$tool' not found (scripts/install-deps.sh with FERRY_DEPS=cross)" >&2; exit 1; }
done

# 2. The target's libraries in a private sysroot: XNNPACK (runtime), OpenSSL's
# libcrypto and zlib (converter). FERRY_CROSS_PACKAGES adds more.
packages=(libxnnpack0 libxnnpack-dev libpthreadpool0 libpthreadpool-dev libcpuinfo0
          libssl3 libssl-dev zlib1g zlib1g-dev ${FERRY_CROSS_PACKAGES:-})
versions=""
for p in "${packages[@]}"; do
  v=$(apt-cache show --no-all-versions "$p:$deb_arch" 2>/dev/null | sed -n 's/^Version: //p' | head -n1)
  if [ -z "$v" ]; then
    echo "cross-test: apt knows no $p:$deb_arch (dpkg --add-architecture $deb_arch && apt-get update; install-deps.sh does it)" >&2
    exit 1
  fi
  versions+="$p:$deb_arch=$v "
done
if [ "$(cat "$sysroot/.ferry-packages" 2>/dev/null)" != "$versions" ]; then
  say "sysroot: downloading ${packages[*]} for $deb_arch"
  rm -rf "$sysroot" "$build/debs"
  mkdir -p "$sysroot" "$build/debs"
  (cd "$build/debs" && apt-get download -q "${packages[@]/%/:$deb_arch}" 2>&1 | grep -v "unsandboxed" || true)
  for deb in "$build"/debs/*.deb; do dpkg -x "$deb" "$sysroot"; done
  [ -e "$sysroot/usr/include/xnnpack.h" ] || { echo "cross-test: the packages gave no xnnpack.h" >&2; exit 1; }
  echo "$versions" >"$sysroot/.ferry-packages"
fi

toolchain=$root/targets/$triple.cmake
common=(-G Ninja -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DFERRY_TARGET_SYSROOT="$sysroot" -DCMAKE_BUILD_TYPE=Release)

# 3. GoogleTest for the target.
gtest_stamp="$sysroot/.ferry-googletest-$(dpkg-query -W -f='${Version}' googletest 2>/dev/null || echo unknown)"
if [ ! -e "$gtest_stamp" ]; then
  say "googletest: building /usr/src/googletest for $triple"
  rm -rf "$build/googletest"
  cmake -S /usr/src/googletest -B "$build/googletest" "${common[@]}" \
    -DCMAKE_INSTALL_PREFIX="$sysroot/usr" -DBUILD_GMOCK=ON -DINSTALL_GTEST=ON >/dev/null
  cmake --build "$build/googletest" -j"$jobs"
  cmake --install "$build/googletest" >/dev/null
  touch "$gtest_stamp"
fi

# 4. ferry: runtime, CLI, tests.
say "ferry: configuring for $triple"
if ! cmake -S "$root" -B "$build/ferry" "${common[@]}" -DFERRY_TESTS=ON >"$build/configure.log" 2>&1; then
  cat "$build/configure.log"; exit 1
fi
grep -E '^-- (Found|ferry)|Warning|ferry:' "$build/configure.log" || true
say "ferry: building"
cmake --build "$build/ferry" -j"$jobs"
# Left out under qemu (they run natively in scripts/test.sh and under the
# sanitizers): converter-side GPTQ (the calibration on the trained
# fixtures, its scalar definition, the CLI's quantization runs), the
# converter's other long sweeps (a legacy tar corrupted byte by byte, the
# .pt2 graph walk's bound, every fixture script read as a model source),
# the CPU emulation of the CUDA
# kernels over the quantized op fixtures, the byte sweeps (every byte of
# three model files corrupted in turn: the verifier's checks, integer code
# that is the same on every target, and the sweep's thousands of model
# runs), and the bad catalogue's checkpoints and sources (the converter's
# refusals, each a CLI process under qemu; its model files, which the
# runtime refuses on the target, stay). None exercises code the target runs
# differently, and qemu-user's soft-float makes them 100-200x slower than
# native. FERRY_QEMU_SKIP='' runs them too.
qemu_skip=${FERRY_QEMU_SKIP-'^(QuantizedTrained\.(GptqIsDeterministic|Int4GptqHalves|Int8GptqWithin).*|Gptq\.Int[48]MatchesTheScalarDefinition|CliQuantize\..*|CudaHost\.QuantizedOpFixturesMatchTheReferenceBackend|Fixtures/ByteSweep\..*|Files/BadCatalogue\.IsHandled/(checkpoints|sources)_.*|LegacyTar\.CorruptionNeverCrashes|Pt2Chain\.WalkIsBoundedOnLongGraphs|Code\.TheFixtureScriptsAreModelSourcesToo)$'}
say "ferry: running the test suite under $qemu${qemu_skip:+ (not: $qemu_skip)}"
# shellcheck disable=SC2086
ctest --test-dir "$build/ferry" --output-on-failure -j"$jobs" ${qemu_skip:+-E "$qemu_skip"} ${FERRY_CTEST_ARGS:-}

# 5. The on-device conformance check, as a user runs it on a board.
cli=$build/ferry/emulated/ferry
work=$build/selftest
rm -rf "$work" && mkdir -p "$work"
fixtures=(
  "lstm_1l_tm|lstm > last > fc|"
  "lstm_2l_bf|lstm > last > fc|--batch-first"
  "lstm_proj_2l|lstm > last > fc|"
  "lstm_bi_2l|lstm > last > fc|"
  "gru_2l|gru > last > fc|"
  "gru_seq_tanh_fc_sigmoid|gru > tanh > fc > sigmoid|"
  "rnn_tanh|rnn > last > fc|--batch-first"
  "mlp|fc1 > relu > fc2 > softmax|"
)
say "selftest: converting ${#fixtures[@]} fixtures, running each stored self-test per backend"
failed=0
for entry in "${fixtures[@]}"; do
  IFS='|' read -r name graph flags <<<"$entry"
  pt=$root/tests/fixtures/models/$name.pt
  [ -e "$pt" ] || continue
  # shellcheck disable=SC2086
  if ! "$cli" convert "$pt" "$work/$name.fb" --graph "$graph" $flags >"$work/$name.convert.log" 2>&1; then
    echo "  $name: convert failed: $(tail -n1 "$work/$name.convert.log")"; failed=1; continue
  fi
  line="  $(printf '%-24s' "$name")"
  for backend in reference simd xnnpack auto; do
    if out=$("$cli" selftest "$work/$name.fb" --backend "$backend" 2>&1); then
      line+=" $backend $(sed -n 's/.*max abs error \([^ ]*\).*/\1/p' <<<"$out")"
    elif grep -q "\[FERRY_UNSUPPORTED\]" <<<"$out"; then
      line+=" $backend n/a"
    else
      line+=" $backend FAIL"; failed=1
      echo "$out" | tail -n2 | sed 's/^/    /'
    fi
  done
  echo "$line"
done
[ $failed = 0 ] || { say "selftest: FAILED"; exit 1; }
say "done: the $arch suite and the self-tests pass under $qemu"
