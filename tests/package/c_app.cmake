# ctest `package.c_app`: the installed package as a firmware or application
# project consumes it. Installs the build tree into a temporary prefix,
# builds examples/c_app against it with find_package(ferry) (and once more
# with pkg-config), converts a fixture with the ferry CLI and runs the app,
# which runs one inference and the model's golden self-test.
#
# Run by ctest as `cmake -D... -P c_app.cmake`; EMULATOR is the cross build's
# CMAKE_CROSSCOMPILING_EMULATOR with '|' for ';' (empty natively).
cmake_policy(VERSION 3.18)
foreach(var FERRY_BUILD_DIR FERRY_SOURCE_DIR WORK_DIR FERRY_CLI GENERATOR C_COMPILER)
  if(NOT ${var})
    message(FATAL_ERROR "c_app.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" EMULATOR "${EMULATOR}")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

# 1. Install.
set(config_args "")
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()
run(${CMAKE_COMMAND} --install ${FERRY_BUILD_DIR} --prefix ${prefix} ${config_args})
foreach(pattern include/ferry/ferry.h lib*/libferry_runtime.a lib*/cmake/ferry/ferry-config.cmake
                lib*/cmake/ferry/ferry-config-version.cmake lib*/cmake/ferry/ferry-targets.cmake
                lib*/pkgconfig/ferry.pc)
  file(GLOB_RECURSE found ${prefix}/${pattern})
  if(NOT found)
    message(FATAL_ERROR "not installed: ${pattern}")
  endif()
endforeach()
message(STATUS "installed into ${prefix}")

# 2. The example, with find_package(ferry) and nothing from the build tree.
set(configure ${CMAKE_COMMAND} -S ${FERRY_SOURCE_DIR}/examples/c_app -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=${C_COMPILER})
if(MAKE_PROGRAM)
  list(APPEND configure -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(TOOLCHAIN)
  # A cross toolchain re-roots searches into the target's folders: name the
  # package's folder directly.
  file(GLOB config_dir LIST_DIRECTORIES true ${prefix}/lib*/cmake/ferry)
  list(APPEND configure -DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN} -Dferry_DIR=${config_dir})
  if(TARGET_SYSROOT)
    list(APPEND configure -DFERRY_TARGET_SYSROOT=${TARGET_SYSROOT})
  endif()
else()
  list(APPEND configure -DCMAKE_PREFIX_PATH=${prefix})
endif()
run(${configure})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
file(GLOB_RECURSE app ${WORK_DIR}/build/ferry_c_app ${WORK_DIR}/build/ferry_c_app.exe)
if(NOT app)
  message(FATAL_ERROR "examples/c_app built no ferry_c_app")
endif()

# 3. A fixture model, converted by the CLI of this build.
run(${FERRY_CLI} convert ${FERRY_SOURCE_DIR}/tests/fixtures/models/gru_1l.pt ${WORK_DIR}/gru.fb
    --graph "gru > last > fc" --batch-first)
run(${EMULATOR} ${app} ${WORK_DIR}/gru.fb 6)
message(STATUS "find_package build:\n${run_output}")
if(NOT run_output MATCHES "selftest max abs error [^\n]*: PASS")
  message(FATAL_ERROR "the app did not pass the self-test:\n${run_output}")
endif()

# 4. The same program through pkg-config (the .pc is relocatable).
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} "")
  file(GLOB pc_dir LIST_DIRECTORIES true ${prefix}/lib*/pkgconfig)
  set(ENV{PKG_CONFIG_LIBDIR} ${pc_dir})
  unset(ENV{PKG_CONFIG_SYSROOT_DIR})
  run(${PKG_CONFIG} --cflags --libs ferry)
  string(STRIP "${run_output}" pc_flags)
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  # The build's own compile and link flags: a cross build's -march and the
  # -L of its sysroot (where a target system has its libraries in /usr/lib).
  separate_arguments(c_flags UNIX_COMMAND "${C_FLAGS}")
  separate_arguments(link_flags UNIX_COMMAND "${LINK_FLAGS}")
  run(${C_COMPILER} ${c_flags} -std=c11 ${FERRY_SOURCE_DIR}/examples/c_app/main.c ${pc_flags} ${link_flags}
      -o ${WORK_DIR}/ferry_c_app_pc)
  run(${EMULATOR} ${WORK_DIR}/ferry_c_app_pc ${WORK_DIR}/gru.fb)
  if(NOT run_output MATCHES ": PASS")
    message(FATAL_ERROR "the pkg-config build did not pass the self-test:\n${run_output}")
  endif()
  message(STATUS "pkg-config build: PASS (${pc_flags})")
endif()
