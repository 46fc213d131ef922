#!/usr/bin/env python3
"""The runtime as a folder of sources any firmware build takes (scripts/export-embedded.sh).

Writes OUT (default dist/ferry-embedded):
  src/                   the runtime's sources and headers, as in runtime/src, with
                         src/ferry/ (the public headers, the generated FlatBuffers
                         header, ferry_config.h) and src/flatbuffers/ (the FlatBuffers
                         headers they include); no CUDA, no XNNPACK library
  library.properties     Arduino
  library.json           PlatformIO
  idf_component.yml      ESP-IDF (the component manager), with
  CMakeLists.txt         idf_component_register under ESP-IDF; a plain library elsewhere
  zephyr/module.yml      Zephyr, with zephyr/CMakeLists.txt and zephyr/Kconfig
  ferry.mk               plain Make: FERRY_SRCS, FERRY_INCLUDES
  examples/FerryStream/  an Arduino sketch streaming a model made by --c-array
  LICENSE, NOTICE, LICENSES/, files.txt (every file the export holds, for checks)

Every list and version in the manifests comes from the project: the sources from
runtime/CMakeLists.txt's globs, the version from the root CMakeLists.txt. The
build flags the numbers depend on are in the sources (runtime/src/common/
build_flags.h, which every source includes first; checked here), so no manifest
passes a flag for them.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIME = os.path.join(ROOT, "runtime")
FIRST_INCLUDE = '#include "common/build_flags.h"'
DESCRIPTION = ("Runs recurrent networks trained in PyTorch (LSTM, GRU, RNN, Linear and the layers "
               "around them) on microcontrollers: whole sequences or one step at a time, in memory "
               "you give it, with nothing allocated.")


def fail(message):
    print("export-embedded: " + message, file=sys.stderr)
    sys.exit(1)


def project_version():
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    m = re.search(r"project\(\s*ferry\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text)
    if not m:
        fail("no project(ferry VERSION x.y.z) in CMakeLists.txt")
    return m.group(1)


def runtime_sources():
    """The .cpp files runtime/CMakeLists.txt builds without CUDA, relative to runtime/."""
    text = open(os.path.join(RUNTIME, "CMakeLists.txt")).read()
    block = re.search(r"file\(GLOB FERRY_RUNTIME_SOURCES CONFIGURE_DEPENDS(.*?)\)", text, re.S)
    if not block:
        fail("no file(GLOB FERRY_RUNTIME_SOURCES ...) in runtime/CMakeLists.txt")
    sources = []
    for folder in re.findall(r"\$\{CMAKE_CURRENT_SOURCE_DIR\}/(src/[\w/]*?)/?\*\.cpp", block.group(1)):
        path = os.path.join(RUNTIME, folder)
        sources += sorted(os.path.join(folder, f) for f in os.listdir(path) if f.endswith(".cpp"))
    extra = re.findall(r"list\(APPEND FERRY_RUNTIME_SOURCES \$\{CMAKE_CURRENT_SOURCE_DIR\}/(src/[\w/.]+\.cpp)\)", text)
    if not extra:
        fail("runtime/CMakeLists.txt: no list(APPEND FERRY_RUNTIME_SOURCES ...) for the CUDA stub")
    return sources + extra


def runtime_headers():
    """Every internal header and .inl, without the CUDA backend's (but the
    entry header the backend table includes)."""
    out = []
    src = os.path.join(RUNTIME, "src")
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, RUNTIME)
        for f in sorted(files):
            if not f.endswith((".h", ".inl")):
                continue
            path = os.path.join(rel, f)
            if rel.endswith("backend/cuda") and f != "cuda_backend.h":
                continue
            out.append(path)
    return sorted(out)


def check_first_include(path):
    for line in open(path):
        if line.startswith("#include"):
            if not line.startswith(FIRST_INCLUDE):
                fail("%s: its first #include is not %s: a build without flags would round differently"
                     % (os.path.relpath(path, ROOT), FIRST_INCLUDE))
            return
    fail("%s: no #include" % os.path.relpath(path, ROOT))


def generate_schema_header(dst):
    flatc = shutil.which("flatc")
    if not flatc:
        fail("flatc not found: install flatbuffers-compiler (scripts/install-deps.sh)")
    subprocess.run([flatc, "--cpp", "--scoped-enums", "--gen-mutable", "-o", dst,
                    os.path.join(ROOT, "schema", "ferry.fbs")], check=True)


def flatbuffers_headers(src_dir, sources, include_dir):
    """The FlatBuffers headers the sources reach (the host compiler's -MM)."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        fail("no host C++ compiler (g++) to list the FlatBuffers headers")
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(os.path.join(include_dir, "flatbuffers"), os.path.join(tmp, "flatbuffers"))
        needed = set()
        for s in sources:
            if "simd/" in s or "quant/x86" in s or "quant/arm" in s:
                continue  # ISA kernels: no FlatBuffers
            r = subprocess.run([cxx, "-std=c++17", "-MM", "-I", src_dir, "-I", tmp,
                                os.path.join(os.path.dirname(src_dir), s)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                fail("listing the headers of %s: %s" % (s, r.stderr.strip()))
            for dep in r.stdout.replace("\\\n", " ").split():
                if dep.startswith(tmp + "/flatbuffers/"):
                    needed.add(os.path.basename(dep))
    return sorted(needed)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def arduino_properties(version, url):
    lines = [
        "name=ferry",
        "version=" + version,
        "author=The ferry authors",
        "maintainer=The ferry authors",
        "sentence=Run LSTM, GRU and RNN models trained in PyTorch on a microcontroller, step by step.",
        "paragraph=" + DESCRIPTION + " Convert the model with `ferry convert model.pt model.fb --c-array "
        "model_data.h`; the header also gives the exact arena and handle sizes.",
        "category=Data Processing",
        "architectures=*",
        "includes=ferry/ferry.h",
    ]
    if url:
        lines.insert(6, "url=" + url)
    return "\n".join(lines) + "\n"


def platformio_json(version, url):
    manifest = {
        "name": "ferry",
        "version": version,
        "description": DESCRIPTION,
        "keywords": ["lstm", "gru", "rnn", "pytorch", "inference", "streaming", "tinyml"],
        "license": "Apache-2.0",
        "authors": [{"name": "The ferry authors", "maintainer": True}],
        "frameworks": "*",
        "platforms": "*",
        "headers": ["ferry/ferry.h"],
        "examples": [{"name": "FerryStream", "base": "examples/FerryStream",
                      "files": ["FerryStream.ino", "model_data.h"]}],
        "build": {
            "srcDir": "src",
            "includeDir": "src",
            # The runtime is C++17; some frameworks default to gnu++11/14.
            "flags": ["-std=gnu++17"],
            "unflags": ["-std=gnu++11", "-std=gnu++14"],
        },
        "export": {"include": ["src", "examples", "LICENSE", "NOTICE", "LICENSES", "library.json"]},
    }
    if url:
        manifest["homepage"] = url
        manifest["repository"] = {"type": "git", "url": url}
    return json.dumps(manifest, indent=2) + "\n"


def idf_component_yml(version, url):
    text = ('version: "%s"\n'
            'description: "%s"\n'
            'license: "Apache-2.0"\n'
            'tags:\n  - lstm\n  - gru\n  - rnn\n  - pytorch\n  - inference\n'
            'dependencies:\n  idf: ">=5.0"\n' % (version, DESCRIPTION.replace('"', "'")))
    if url:
        text += 'url: "%s"\n' % url
    return text


def root_cmake(version, sources):
    listed = "\n".join("  " + s for s in sources)
    return """# ferry %s, the runtime as an ESP-IDF component, or a plain static library
# (add_subdirectory(ferry-embedded), then link ferry_runtime). No flags are
# needed: the ones the numbers depend on are in the sources.
cmake_minimum_required(VERSION 3.16)
set(FERRY_EMBEDDED_SOURCES
%s)
if(ESP_PLATFORM)
  idf_component_register(SRCS ${FERRY_EMBEDDED_SOURCES} INCLUDE_DIRS "src")
else()
  project(ferry_embedded VERSION %s LANGUAGES CXX)
  add_library(ferry_runtime STATIC ${FERRY_EMBEDDED_SOURCES})
  target_include_directories(ferry_runtime PUBLIC ${CMAKE_CURRENT_LIST_DIR}/src)
  target_compile_features(ferry_runtime PUBLIC cxx_std_17)
endif()
""" % (version, listed, version)


def zephyr_files(sources):
    listed = "\n".join("    ${ZEPHYR_CURRENT_MODULE_DIR}/" + s for s in sources)
    module = "name: ferry\nbuild:\n  cmake: zephyr\n  kconfig: zephyr/Kconfig\n"
    cmake = """# ferry as a Zephyr module: CONFIG_FERRY=y builds the runtime into the
# application (prj.conf: CONFIG_CPP=y, CONFIG_STD_CPP17=y, CONFIG_REQUIRES_FULL_LIBCPP=y).
if(CONFIG_FERRY)
  zephyr_library_named(ferry)
  zephyr_library_sources(
%s)
  zephyr_include_directories(${ZEPHYR_CURRENT_MODULE_DIR}/src)
  zephyr_compile_definitions(FERRY_MAX_CHAIN=${CONFIG_FERRY_MAX_CHAIN} FERRY_MAX_CELLS=${CONFIG_FERRY_MAX_CELLS})
endif()
""" % listed
    kconfig = """config FERRY
	bool "ferry: run recurrent networks trained in PyTorch"
	depends on CPP
	select REQUIRES_FULL_LIBCPP
	help
	  The ferry runtime: LSTM, GRU, RNN and Linear models converted by
	  `ferry convert`, run whole or step by step in caller memory.

if FERRY

config FERRY_MAX_CHAIN
	int "Most elements of a model's chain (the model handle's capacity)"
	default 16
	range 1 255

config FERRY_MAX_CELLS
	int "Most recurrent (layer, direction) cells of a model"
	default 8
	range 1 1024

endif # FERRY
"""
    return module, cmake, kconfig


def make_fragment(version, sources):
    listed = " \\\n".join("  $(FERRY_DIR)" + s for s in sources)
    return """# ferry %s for plain Make: include this file, then add $(FERRY_SRCS) to the
# sources you compile as C++17 and $(FERRY_INCLUDES) to your compiler flags.
# No other flag is needed: the ones the numbers depend on are in the sources.
#
#   include path/to/ferry-embedded/ferry.mk
#   OBJS += $(patsubst %%.cpp,build/%%.o,$(FERRY_SRCS))
#   CXXFLAGS += $(FERRY_INCLUDES)
FERRY_DIR := $(dir $(lastword $(MAKEFILE_LIST)))
FERRY_VERSION := %s
FERRY_INCLUDES := -I$(FERRY_DIR)src
FERRY_SRCS := \\
%s
""" % (version, version, listed)


CONFIG_H = """/* The model handle's capacities for this export (scripts/export-embedded.sh
 * --max-chain/--max-cells): the handle is FERRY_MODEL_HANDLE_BYTES, which
 * grows with them. A model header (`ferry convert --c-array`) stops the
 * build with #error if its model needs more. A build may still set them
 * with -D, which wins. */
#ifndef FERRY_MAX_CHAIN
#define FERRY_MAX_CHAIN %d
#endif
#ifndef FERRY_MAX_CELLS
#define FERRY_MAX_CELLS %d
#endif
/* The per-layer profiler hook (ferry_session_options.profiler): define
 * FERRY_PROFILER 0 to leave it out and save its code in flash; a session
 * asking for a profiler is then refused (FERRY_UNSUPPORTED). */
"""

SKETCH = r"""// FerryStream: a recurrent model streamed one step at a time on an Arduino
// board, with ferry. model_data.h is the model as a C array, made by
//
//   ferry convert model.pt model.fb --c-array model_data.h
//
// (here examples/lstm_gpu.pt of the ferry repository: a 2-layer LSTM 16 -> 64
// and a Linear 64 -> 8, 219 KB in flash). The header also says exactly how
// much RAM the model handle and the session take on this board
// (MODEL_DATA_HANDLE_BYTES, MODEL_DATA_ARENA_BYTES): nothing is allocated.
// Each loop() feeds one step of features and prints the outputs; put your
// sensor's features where the sketch makes a test signal.
#include <ferry/ferry.h>

#include "model_data.h"

alignas(FERRY_ALIGNMENT) static uint8_t handle_memory[MODEL_DATA_HANDLE_BYTES];
alignas(FERRY_ALIGNMENT) static uint8_t arena[MODEL_DATA_ARENA_BYTES];

static ferry_model* model = nullptr;
static ferry_session* session = nullptr;
static ferry_model_info info;
static float features[64];
static float outputs[64];
static uint32_t step_index = 0;

static void stop(const char* what, ferry_status status) {
  Serial.print("ferry: ");
  Serial.print(what);
  Serial.print(": ");
  Serial.print(ferry_status_string(status));
  Serial.print(": ");
  Serial.println(ferry_last_error());
  for (;;) delay(1000);
}

void setup() {
  Serial.begin(115200);
  while (!Serial && millis() < 3000) {
  }
  ferry_model_options model_options = {};
  model_options.struct_size = sizeof model_options;
  model_options.handle_memory = handle_memory;
  model_options.handle_memory_size = sizeof handle_memory;
  ferry_status status = ferry_model_load(model_data, model_data_len, &model_options, &model);
  if (status != FERRY_OK) stop("load", status);
  info.struct_size = sizeof info;
  ferry_model_get_info(model, &info);
  if (info.input_size > 64 || info.output_size > 64) stop("the sketch's buffers hold 64 values", FERRY_UNSUPPORTED);

  ferry_session_options session_options;
  ferry_session_options_init(&session_options);  // max_batch 1, max_seq 1: streaming
  status = ferry_session_init(model, &session_options, arena, sizeof arena, &session);
  if (status != FERRY_OK) stop("session", status);
  Serial.print("ferry ");
  Serial.print(ferry_version());
  Serial.print(": model ");
  Serial.print((unsigned long)model_data_len);
  Serial.print(" bytes, arena ");
  Serial.print((unsigned long)sizeof arena);
  Serial.print(" bytes, handle ");
  Serial.print((unsigned long)sizeof handle_memory);
  Serial.println(" bytes");
}

void loop() {
  // One step of features: a test signal. The state (h, c) stays in the
  // session from one call to the next; ferry_reset starts a new sequence.
  for (size_t i = 0; i < info.input_size; ++i) features[i] = sinf(0.1f * (float)step_index + 0.5f * (float)i);
  const unsigned long start = micros();
  const ferry_status status = ferry_step(session, features, 1, outputs, info.output_size);
  const unsigned long took = micros() - start;
  if (status != FERRY_OK) stop("step", status);
  Serial.print("step ");
  Serial.print((unsigned long)step_index);
  Serial.print(" (");
  Serial.print(took);
  Serial.print(" us):");
  for (size_t i = 0; i < info.output_size; ++i) {
    Serial.print(' ');
    Serial.print(outputs[i], 5);
  }
  Serial.println();
  ++step_index;
  delay(100);
}
"""


def host_cli():
    cli = os.environ.get("FERRY_HOST_CLI") or os.path.join(ROOT, "build", "converter", "ferry")
    if os.access(cli, os.X_OK):
        return cli
    build = os.path.join(ROOT, "build-export-cli")
    print("export-embedded: building the ferry CLI in " + build)
    subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DFERRY_TESTS=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "-j" + os.environ.get("FERRY_JOBS", "2"), "--target", "ferry"],
                   check=True)
    return os.path.join(build, "converter", "ferry")


def main():
    ap = argparse.ArgumentParser(description="Export the ferry runtime for firmware builds.")
    ap.add_argument("--out", default=os.path.join(ROOT, "dist", "ferry-embedded"))
    ap.add_argument("--max-chain", type=int, default=16, help="the handle's chain capacity (default 16)")
    ap.add_argument("--max-cells", type=int, default=8, help="the handle's recurrent cell capacity (default 8)")
    ap.add_argument("--url", default="", help="the project's address, written into the manifests")
    ap.add_argument("--flatbuffers-include", default="/usr/include",
                    help="the folder holding flatbuffers/ (default /usr/include)")
    args = ap.parse_args()
    if not 1 <= args.max_chain <= 255 or args.max_cells < 1:
        fail("--max-chain is 1..255 and --max-cells at least 1")
    if not os.path.isfile(os.path.join(args.flatbuffers_include, "flatbuffers", "flatbuffers.h")):
        fail("no flatbuffers/flatbuffers.h under %s: install libflatbuffers-dev" % args.flatbuffers_include)

    version = project_version()
    sources = runtime_sources()
    headers = runtime_headers()
    for s in sources:
        check_first_include(os.path.join(RUNTIME, s))

    out = os.path.abspath(args.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    src = os.path.join(out, "src")
    # The runtime's tree under src/ (runtime/src/x -> src/x), the public
    # headers in src/ferry/: Arduino puts src/ alone on the include path.
    for rel in sources + headers:
        dst = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(RUNTIME, rel), dst)
    for f in sorted(os.listdir(os.path.join(RUNTIME, "include", "ferry"))):
        os.makedirs(os.path.join(src, "ferry"), exist_ok=True)
        shutil.copyfile(os.path.join(RUNTIME, "include", "ferry", f), os.path.join(src, "ferry", f))
    generate_schema_header(os.path.join(src, "ferry"))
    write(os.path.join(src, "ferry", "ferry_config.h"), CONFIG_H % (args.max_chain, args.max_cells))
    for f in flatbuffers_headers(src, sources, args.flatbuffers_include):
        os.makedirs(os.path.join(src, "flatbuffers"), exist_ok=True)
        shutil.copyfile(os.path.join(args.flatbuffers_include, "flatbuffers", f), os.path.join(src, "flatbuffers", f))

    # Licenses: ours, and FlatBuffers' for the headers under src/flatbuffers/.
    shutil.copyfile(os.path.join(ROOT, "LICENSE"), os.path.join(out, "LICENSE"))
    shutil.copyfile(os.path.join(ROOT, "NOTICE"), os.path.join(out, "NOTICE"))
    os.makedirs(os.path.join(out, "LICENSES"))
    shutil.copyfile(os.path.join(ROOT, "LICENSE"), os.path.join(out, "LICENSES", "flatbuffers-Apache-2.0.txt"))
    debian = "/usr/share/doc/libflatbuffers-dev/copyright"
    if os.path.isfile(debian):
        shutil.copyfile(debian, os.path.join(out, "LICENSES", "flatbuffers-copyright"))

    # The example sketch and its model.
    example = os.path.join(out, "examples", "FerryStream")
    write(os.path.join(example, "FerryStream.ino"), SKETCH)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([host_cli(), "convert", os.path.join(ROOT, "examples", "lstm_gpu.pt"),
                        os.path.join(tmp, "model.fb"), "--graph", "lstm > last > fc", "--batch-first",
                        "--c-array", os.path.join(example, "model_data.h"), "--quiet"], check=True)

    exported = [os.path.relpath(os.path.join(out, s), out) for s in sources]
    write(os.path.join(out, "library.properties"), arduino_properties(version, args.url))
    write(os.path.join(out, "library.json"), platformio_json(version, args.url))
    write(os.path.join(out, "idf_component.yml"), idf_component_yml(version, args.url))
    write(os.path.join(out, "CMakeLists.txt"), root_cmake(version, exported))
    module, zcmake, kconfig = zephyr_files(exported)
    write(os.path.join(out, "zephyr", "module.yml"), module)
    write(os.path.join(out, "zephyr", "CMakeLists.txt"), zcmake)
    write(os.path.join(out, "zephyr", "Kconfig"), kconfig)
    write(os.path.join(out, "ferry.mk"), make_fragment(version, exported))
    write(os.path.join(out, "README.md"),
          "# ferry %s, embedded export\n\n%s\n\nAdd it with Arduino (this folder as a library), PlatformIO "
          "(`lib_deps` = this folder), ESP-IDF (a component), Zephyr (a module), CMake "
          "(`add_subdirectory`) or Make (`include ferry.mk`): see docs/embedding.md in the ferry "
          "repository. `src/ferry/ferry_config.h` holds the model handle's capacities (%d chain "
          "elements, %d recurrent cells).\n" % (version, DESCRIPTION, args.max_chain, args.max_cells))

    files = []
    for dirpath, _, names in os.walk(out):
        files += [os.path.relpath(os.path.join(dirpath, n), out) for n in names]
    files.append("files.txt")
    write(os.path.join(out, "files.txt"), "\n".join(sorted(files)) + "\n")
    print("export-embedded: ferry %s, %d sources, %d files in %s" % (version, len(sources), len(files), out))


if __name__ == "__main__":
    main()
