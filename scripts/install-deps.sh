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
  nlohmann-json3-dev
)
# Extra groups, asked for by name: FERRY_DEPS="fixtures bench".
for group in ${FERRY_DEPS:-}; do
  case "$group" in
    fixtures) packages+=(python3-torch python3-statsmodels) ;;
    bench) packages+=(libtorch-dev libopenblas-dev python3-torch) ;;
    *) echo "install-deps: unknown group '$group'" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
