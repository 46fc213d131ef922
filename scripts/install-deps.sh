#!/usr/bin/env bash
# Installs the Debian packages ferry builds and tests with. Idempotent: packages
# already present are skipped, and apt-get runs only when something is missing.
# Runs as root, or through sudo otherwise.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev
  libflatbuffers-dev flatbuffers-compiler
  libxnnpack-dev libpthreadpool-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libssl-dev zlib1g-dev libcli11-dev
  graphviz  # the tests render every fixture's `ferry inspect --dot` with Graphviz's dot
)
# Extra groups, asked for by name: FERRY_DEPS="fixtures bench cross".
foreign_archs=()
for group in ${FERRY_DEPS:-}; do
  case "$group" in
    # libblas3/liblapack3: the reference BLAS the fixture scripts pin (fixture_env.py).
    fixtures) packages+=(python3-torch python3-statsmodels python3-sklearn libblas3 liblapack3) ;;
    bench) packages+=(libtorch-dev libopenblas-dev python3-torch) ;;
    # The Python package's build and tests (scripts/test-python.sh): Debian's
    # python3 with its headers and venv, numpy and pytest, and torch for
    # ferry.check against real modules.
    python) packages+=(python3-dev python3-venv python3-numpy python3-pytest python3-torch) ;;
    # libFuzzer + ASan/UBSan runtimes for tests/fuzz/run.sh.
    fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    cross)
      # Cross compilers + qemu-user for the aarch64/armv7 test runs
      # (scripts/cross-test.sh), and the bare-metal toolchain with newlib for
      # the Cortex-M firmware build, run on QEMU's mps2 boards
      # (examples/firmware/build.sh), and python3-yaml for the embedded
      # export's manifest checks (scripts/test-embedded.sh).
      packages+=(g++-aarch64-linux-gnu g++-arm-linux-gnueabihf qemu-user qemu-system-arm
                 gcc-arm-none-eabi binutils-arm-none-eabi libnewlib-arm-none-eabi
                 libstdc++-arm-none-eabi-newlib libstdc++-arm-none-eabi-dev python3-yaml)
      # The target's XNNPACK is fetched with `apt-get download pkg:arm64` and
      # unpacked into a private sysroot, never installed (Debian's XNNPACK is
      # not multi-arch co-installable); apt only has to know the architectures.
      foreign_archs+=(arm64 armhf) ;;
    *) echo "install-deps: unknown group '$group'" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

missing_archs=()
for a in "${foreign_archs[@]}"; do
  dpkg --print-foreign-architectures | grep -qx "$a" || missing_archs+=("$a")
done

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_archs[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

for a in "${missing_archs[@]}"; do
  echo "install-deps: adding foreign architecture $a (package lists only)"
  $SUDO dpkg --add-architecture "$a"
done
# A mirror that is mid-sync fails one index now and then; apt-get install
# below still fails loudly if a package really cannot be found.
$SUDO apt-get update -q || echo "install-deps: warning: apt-get update reported errors, continuing" >&2
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
