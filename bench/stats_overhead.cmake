# The counters-overhead benchmark (bench/stats_overhead.c), built twice
# from the library sources with identical flags: stats_overhead_on with
# the counters, stats_overhead_off with -DGPUFILE_NO_STATS. Include this
# file from bench/CMakeLists.txt (after gpufile_objects exists). Run:
#   bench/stats_overhead_on --other bench/stats_overhead_off
set(_so_dir ${CMAKE_CURRENT_LIST_DIR})
set(_so_lib_sources ${GPUFILE_SOURCES})
foreach(_so_mode on off)
  add_executable(stats_overhead_${_so_mode} ${_so_dir}/stats_overhead.c ${_so_lib_sources})
  target_include_directories(stats_overhead_${_so_mode} PRIVATE
    ${_so_dir}/../include ${GPUFILE_PRIVATE_INCLUDE_DIRS})
  target_compile_definitions(stats_overhead_${_so_mode} PRIVATE
    $<TARGET_PROPERTY:gpufile_objects,COMPILE_DEFINITIONS>)
  target_link_libraries(stats_overhead_${_so_mode} PRIVATE
    $<TARGET_PROPERTY:gpufile_objects,LINK_LIBRARIES>)
endforeach()
target_compile_definitions(stats_overhead_off PRIVATE GPUFILE_NO_STATS=1)
