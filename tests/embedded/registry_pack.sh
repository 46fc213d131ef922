#!/usr/bin/env bash
# Packs an embedded export (scripts/export-embedded.sh) with the registries'
# own tools, which validate the manifests as they pack: PlatformIO's
# `pio pkg pack` (library.json) and ESP-IDF's component manager
# `compote component pack` (idf_component.yml). Both come from PyPI at pinned
# versions, in a virtual environment cached in BUILD_DIR. Not part of CI
# (it installs from PyPI); docs/embedding.md says what it showed.
#
#   tests/embedded/registry_pack.sh EXPORT_DIR [BUILD_DIR]
#
# PlatformIO checks the `license` field against the SPDX list it downloads
# from its server; offline, that one check cannot run, so the library is
# packed a second time from a copy without the field (and says so).
set -euo pipefail
export_dir=$(realpath "${1:?usage: tests/embedded/registry_pack.sh EXPORT_DIR [BUILD_DIR]}")
work=$(realpath -m "${2:-$(dirname "$0")/../../build-registry-pack}")
venv=$work/venv
if [ ! -x "$venv/bin/pio" ] || [ ! -x "$venv/bin/compote" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "platformio==6.2.0" "idf-component-manager==3.1.2"
fi
rm -rf "$work/out" && mkdir -p "$work/out"
echo "registry-pack: PlatformIO $("$venv/bin/pio" --version | awk '{print $NF}')"
if ! (cd "$work/out" && "$venv/bin/pio" pkg pack "$export_dir"); then
  echo "registry-pack: pio pkg pack failed; again without the license field (SPDX list needs the network)"
  rm -rf "$work/nolicense" && cp -r "$export_dir" "$work/nolicense"
  python3 - "$work/nolicense/library.json" <<'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
j.pop("license", None)
json.dump(j, open(p, "w"), indent=2)
PY
  (cd "$work/out" && "$venv/bin/pio" pkg pack "$work/nolicense")
fi
echo "registry-pack: ESP-IDF component manager $("$venv/bin/pip" show idf-component-manager | awk '/^Version/ {print $2}')"
(cd "$export_dir" && "$venv/bin/compote" component pack --name ferry --dest-dir "$work/out")
ls -l "$work/out"
