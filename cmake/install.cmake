# `cmake --install`: what a firmware or application project consumes.
#
#   include/ferry/*.h, *.hpp             the C API (and the C++ wrapper)
#   lib/libferry_runtime.a                the runtime
#   lib/cmake/ferry/ferry-config.cmake    find_package(ferry) -> ferry::runtime
#   lib/cmake/ferry/ferry-config-version.cmake
#   lib/pkgconfig/ferry.pc                pkg-config --cflags --libs ferry
#   bin/ferry                             the CLI (converter/CMakeLists.txt)
#
# The runtime is a static library: whatever it links (libm, XNNPACK and
# pthreadpool when FERRY_XNNPACK found them) is part of its link interface,
# written into both ferry-config.cmake (through the exported target) and
# ferry.pc (Libs).
include(CMakePackageConfigHelpers)

set(FERRY_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ferry CACHE STRING
    "Where ferry-config.cmake is installed, relative to the prefix")
mark_as_advanced(FERRY_INSTALL_CMAKEDIR)

# In the build tree the target is ferry_runtime (alias ferry::runtime);
# installed, it is ferry::runtime.
set_target_properties(ferry_runtime PROPERTIES EXPORT_NAME runtime)
install(TARGETS ferry_runtime EXPORT ferry-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(EXPORT ferry-targets NAMESPACE ferry:: FILE ferry-targets.cmake
        DESTINATION ${FERRY_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ferry-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/ferry-config.cmake
  INSTALL_DESTINATION ${FERRY_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API; from 1.0 on, the major version.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_ferry_compat SameMinorVersion)
else()
  set(_ferry_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ferry-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${_ferry_compat})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ferry-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ferry-config-version.cmake
        DESTINATION ${FERRY_INSTALL_CMAKEDIR})

# ferry.pc, relocatable (prefix found from the file's own folder): Libs lists
# the runtime's link dependencies as -l flags (imported targets and full
# paths become -l<name>). This file is included after runtime/, so the
# runtime's link libraries are final here.
function(_ferry_pc_libs out_var)
  set(libs "")
  get_target_property(deps ferry_runtime LINK_LIBRARIES)
  get_target_property(iface ferry_runtime INTERFACE_LINK_LIBRARIES)
  foreach(dep IN LISTS deps iface)
    # Skip build-only generator expressions and the ::@ markers CMake puts
    # around items added from another directory.
    if(NOT dep OR dep MATCHES "^\\$<" OR dep MATCHES "^::@")
      continue()
    endif()
    if(TARGET ${dep})
      get_target_property(type ${dep} TYPE)
      get_target_property(imported ${dep} IMPORTED)
      if(type STREQUAL "INTERFACE_LIBRARY" OR NOT imported)
        continue()
      endif()
      get_target_property(dep ${dep} LOCATION)
    endif()
    if(dep MATCHES "^-")
      list(APPEND libs "${dep}")
    else()
      get_filename_component(name "${dep}" NAME_WE)
      string(REGEX REPLACE "^lib" "" name "${name}")
      list(APPEND libs "-l${name}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES libs)
  list(JOIN libs " " libs)
  set(${out_var} "${libs}" PARENT_SCOPE)
endfunction()
_ferry_pc_libs(FERRY_PC_LIBS)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FERRY_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(FERRY_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _ferry_up /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
  string(REGEX REPLACE "/$" "" _ferry_up "${_ferry_up}")
  set(FERRY_PC_PREFIX "\${pcfiledir}/${_ferry_up}")
  set(FERRY_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(FERRY_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(FERRY_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/ferry.pc.in ${PROJECT_BINARY_DIR}/ferry.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ferry.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
