# ferry_host_headers(<dir> <name>...): makes <dir>/usr/include hold symlinks
# to the named header-only libraries of the build machine (flatbuffers,
# nlohmann, eigen3, CLI), and, for those that ship one, their CMake package folder
# under <dir>/usr/share. A cross or bare-metal compiler then sees exactly
# these libraries and never the rest of /usr/include, whose libc and
# architecture headers are the host's.
#
# Used by the toolchain files in this folder; FERRY_HOST_INCLUDE_DIR (default
# /usr/include) says where the host's copies live.
function(ferry_host_headers dir)
  if(NOT FERRY_HOST_INCLUDE_DIR)
    set(FERRY_HOST_INCLUDE_DIR /usr/include)
  endif()
  file(MAKE_DIRECTORY ${dir}/usr/include ${dir}/usr/share/cmake)
  foreach(name IN LISTS ARGN)
    set(links ${FERRY_HOST_INCLUDE_DIR}/${name} ${dir}/usr/include/${name})
    if(name STREQUAL "eigen3")
      list(APPEND links /usr/share/eigen3 ${dir}/usr/share/eigen3)
    elseif(name STREQUAL "nlohmann")
      list(APPEND links /usr/share/cmake/nlohmann_json ${dir}/usr/share/cmake/nlohmann_json)
    elseif(name STREQUAL "CLI")
      list(APPEND links /usr/share/cmake/CLI11 ${dir}/usr/share/cmake/CLI11)
    endif()
    while(links)
      list(POP_FRONT links from to)
      if(EXISTS ${from} AND NOT EXISTS ${to})
        file(CREATE_LINK ${from} ${to} SYMBOLIC)
      endif()
    endwhile()
  endforeach()
endfunction()
