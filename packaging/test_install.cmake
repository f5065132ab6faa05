# cmake -P script (a CTest test): installs the build into PREFIX, then builds and runs the consumer
# program against the installed tree twice: via pkg-config and via find_package(moe).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${PREFIX}" "${WORK}")
foreach(component runtime dev)
  run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${PREFIX}" --component ${component})
endforeach()
file(GLOB pc_files "${PREFIX}/lib*/pkgconfig/moe.pc" "${PREFIX}/lib/*/pkgconfig/moe.pc")
list(GET pc_files 0 pc)
get_filename_component(pc_dir "${pc}" DIRECTORY)
get_filename_component(lib_dir "${pc_dir}" DIRECTORY)
file(GLOB soname "${lib_dir}/libmoe.so.[0-9]")
if(NOT soname OR NOT EXISTS "${PREFIX}/include/moe_c.h")
  message(FATAL_ERROR "install tree lacks libmoe.so.N or moe_c.h")
endif()

# 1. pkg-config, as a Makefile would do it.
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
set(ENV{PKG_CONFIG_LIBDIR} "${pc_dir}")
run(pkg-config --cflags --libs moe)
separate_arguments(flags UNIX_COMMAND "${out}")
file(MAKE_DIRECTORY "${WORK}")
run(${CC} "${SOURCE}/consumer.c" ${flags} "-Wl,-rpath,${lib_dir}" -o "${WORK}/consumer_pc")
run("${WORK}/consumer_pc" "${MODEL}")
message(STATUS "pkg-config: ${out}")

# 2. find_package(moe) -> moe::moe.
run(${CMAKE_COMMAND} -S "${SOURCE}" -B "${WORK}/cmake" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${PREFIX}" -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK}/cmake")
run("${WORK}/cmake/consumer" "${MODEL}")
message(STATUS "find_package: ${out}")
