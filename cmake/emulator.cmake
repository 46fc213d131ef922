# ferry_host_command(<out_var> <target>): a command line, usable from a shell
# (std::system) on the build machine, that runs executable <target>.
#
# Natively that is the target's file. In a cross build with
# CMAKE_CROSSCOMPILING_EMULATOR (qemu-user, see targets/linux-cross.cmake)
# it is a generated script, <build>/emulated/<target>, that execs the
# emulator on the target's file: ctest and gtest_discover_tests use the
# emulator by themselves, but the e2e tests start the ferry CLI through
# std::system, which does not know about it.
function(ferry_host_command out_var target)
  if(CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR)
    if(CMAKE_VERSION VERSION_LESS 3.20)
      message(FATAL_ERROR "running tests under an emulator needs CMake 3.20 or newer")
    endif()
    set(line "exec")
    foreach(arg IN LISTS CMAKE_CROSSCOMPILING_EMULATOR)
      string(REPLACE "'" "'\\''" arg "${arg}")
      string(APPEND line " '${arg}'")
    endforeach()
    set(script ${CMAKE_BINARY_DIR}/emulated/${target})
    file(GENERATE OUTPUT ${script}
         CONTENT "#!/bin/sh\n# Runs ${target} (built for ${CMAKE_SYSTEM_PROCESSOR}) under the emulator.\n${line} '$<TARGET_FILE:${target}>' \"$@\"\n"
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    set(${out_var} ${script} PARENT_SCOPE)
  else()
    set(${out_var} "$<TARGET_FILE:${target}>" PARENT_SCOPE)
  endif()
endfunction()
