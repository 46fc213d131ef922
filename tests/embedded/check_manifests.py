#!/usr/bin/env python3
"""Checks an embedded export (scripts/export-embedded.sh) against itself and the project.

Each manifest is parsed (Arduino's properties, PlatformIO's JSON, ESP-IDF's and
Zephyr's YAML, Zephyr's Kconfig, the CMake and Make source lists) and checked:
the version is the root CMakeLists.txt's, every source list is the build's
(runtime/CMakeLists.txt's, and every .cpp under src/, which Arduino and
PlatformIO compile), the files the manifests name exist, every quoted
#include of the export resolves inside it, and files.txt lists exactly the
export's files. Exits 1 naming each mismatch.

    tests/embedded/check_manifests.py EXPORT_DIR
"""
import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import export_embedded  # noqa: E402  (the project's version and source list)

problems = []


def check(ok, message):
    if not ok:
        problems.append(message)


def cmake_list(text, start, end):
    m = re.search(re.escape(start) + r"(.*?)" + re.escape(end), text, re.S)
    return m.group(1).split() if m else None


def main():
    out = os.path.abspath(sys.argv[1])
    version = export_embedded.project_version()
    build = sorted(export_embedded.runtime_sources())  # src/... relative to runtime/, as exported
    on_disk = sorted(os.path.relpath(os.path.join(d, f), out)
                     for d, _, fs in os.walk(os.path.join(out, "src")) for f in fs if f.endswith(".cpp"))
    check(on_disk == build, "the .cpp files under src/ (Arduino and PlatformIO compile them all) are not the "
          "build's: extra %s, missing %s" % (sorted(set(on_disk) - set(build)), sorted(set(build) - set(on_disk))))

    # Arduino
    props = {}
    for line in open(os.path.join(out, "library.properties")):
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            props[key] = value
    for key in ("name", "version", "author", "maintainer", "sentence", "paragraph", "category", "architectures"):
        check(props.get(key), "library.properties: no %s" % key)
    check(props.get("version") == version, "library.properties: version %s, CMake says %s" % (props.get("version"), version))
    for inc in props.get("includes", "").split(","):
        check(os.path.isfile(os.path.join(out, "src", inc.strip())), "library.properties: includes=%s is not in src/" % inc)
    check(os.path.isfile(os.path.join(out, "examples", "FerryStream", "FerryStream.ino")), "no examples/FerryStream/FerryStream.ino")

    # PlatformIO
    pio = json.load(open(os.path.join(out, "library.json")))
    check(pio.get("version") == version, "library.json: version %s, CMake says %s" % (pio.get("version"), version))
    check(pio.get("build", {}).get("srcDir") == "src" and os.path.isdir(os.path.join(out, "src")), "library.json: build.srcDir")
    for flag in pio.get("build", {}).get("flags", []):
        check(not re.search(r"fp-contract|FERRY_|-O", flag), "library.json: a flag the sources should carry: " + flag)
    for h in pio.get("headers", []):
        check(os.path.isfile(os.path.join(out, "src", h)), "library.json: header %s missing" % h)
    for ex in pio.get("examples", []):
        for f in ex.get("files", []):
            check(os.path.isfile(os.path.join(out, ex["base"], f)), "library.json: example file %s/%s missing" % (ex["base"], f))

    # ESP-IDF, and the root CMakeLists.txt (ESP-IDF component or plain library)
    idf = yaml.safe_load(open(os.path.join(out, "idf_component.yml")))
    check(str(idf.get("version")) == version, "idf_component.yml: version %s, CMake says %s" % (idf.get("version"), version))
    check("idf" in (idf.get("dependencies") or {}), "idf_component.yml: no idf dependency")
    root_cmake = open(os.path.join(out, "CMakeLists.txt")).read()
    check("idf_component_register(SRCS ${FERRY_EMBEDDED_SOURCES}" in root_cmake, "CMakeLists.txt: no idf_component_register")
    listed = cmake_list(root_cmake, "set(FERRY_EMBEDDED_SOURCES", ")")
    check(listed is not None and sorted(listed) == build, "CMakeLists.txt: FERRY_EMBEDDED_SOURCES is not the build's list")
    check(("VERSION %s " % version) in root_cmake, "CMakeLists.txt: project version is not %s" % version)

    # Zephyr
    module = yaml.safe_load(open(os.path.join(out, "zephyr", "module.yml")))
    check(module.get("name") == "ferry", "zephyr/module.yml: name")
    cm = module.get("build", {}).get("cmake")
    check(cm and os.path.isfile(os.path.join(out, cm, "CMakeLists.txt")), "zephyr/module.yml: build.cmake has no CMakeLists.txt")
    kc = module.get("build", {}).get("kconfig")
    check(kc and os.path.isfile(os.path.join(out, kc)), "zephyr/module.yml: build.kconfig missing")
    kconfig = open(os.path.join(out, "zephyr", "Kconfig")).read()
    symbols = re.findall(r"^config (\w+)$", kconfig, re.M)
    check(symbols == ["FERRY", "FERRY_MAX_CHAIN", "FERRY_MAX_CELLS"], "zephyr/Kconfig: symbols %s" % symbols)
    zcmake = open(os.path.join(out, "zephyr", "CMakeLists.txt")).read()
    for sym in re.findall(r"CONFIG_(\w+)", zcmake):
        check(sym in symbols or sym in ("CPP", "STD_CPP17", "REQUIRES_FULL_LIBCPP"), "zephyr/CMakeLists.txt: CONFIG_%s is not in Kconfig" % sym)
    zlisted = cmake_list(zcmake, "zephyr_library_sources(", ")")
    check(zlisted is not None and sorted(s.replace("${ZEPHYR_CURRENT_MODULE_DIR}/", "") for s in zlisted) == build,
          "zephyr/CMakeLists.txt: the sources are not the build's list")

    # Make
    mk = open(os.path.join(out, "ferry.mk")).read()
    check("FERRY_VERSION := %s\n" % version in mk, "ferry.mk: FERRY_VERSION is not %s" % version)
    mlisted = re.search(r"FERRY_SRCS := \\\n(.*)", mk, re.S)
    mlisted = [s.replace("$(FERRY_DIR)", "") for s in mlisted.group(1).replace("\\", " ").split()] if mlisted else None
    check(mlisted is not None and sorted(mlisted) == build, "ferry.mk: FERRY_SRCS is not the build's list")

    # Every quoted #include resolves inside the export (beside the file or under src/).
    for d, _, fs in os.walk(os.path.join(out, "src")):
        for f in fs:
            path = os.path.join(d, f)
            for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(path, errors="replace").read(), re.M):
                if d.endswith("/flatbuffers") and not inc.startswith("flatbuffers/"):
                    continue  # FlatBuffers' optional includes (absl), off unless asked for
                ok = os.path.isfile(os.path.join(d, inc)) or os.path.isfile(os.path.join(out, "src", inc))
                check(ok, "%s: #include \"%s\" is not in the export" % (os.path.relpath(path, out), inc))

    # The licenses, and files.txt
    for f in ("LICENSE", "NOTICE", "LICENSES/flatbuffers-Apache-2.0.txt"):
        check(os.path.isfile(os.path.join(out, f)), "no " + f)
    listed_files = open(os.path.join(out, "files.txt")).read().split()
    actual = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
    check(sorted(listed_files) == actual, "files.txt is not the export's file list")

    if problems:
        for p in problems:
            print("check_manifests: " + p, file=sys.stderr)
        sys.exit(1)
    print("check_manifests: %s: Arduino, PlatformIO, ESP-IDF, Zephyr and Make manifests agree with the build "
          "(version %s, %d sources)" % (out, version, len(build)))


if __name__ == "__main__":
    main()
