# Installs gpufile.pc (install(SCRIPT), CMakeLists.txt): the one without an
# RPATH when the installed libdir is one the linker searches by itself,
# else the one with -Wl,-rpath,${libdir}. Set by the install(CODE) before
# it: GPUFILE_PC_LIBDIR, GPUFILE_PC_SYSTEM_DIRS, GPUFILE_PC_RPATH_FILE,
# GPUFILE_PC_SYSTEM_FILE.
if(IS_ABSOLUTE "${GPUFILE_PC_LIBDIR}")
  set(_gpufile_libdir "${GPUFILE_PC_LIBDIR}")
else()
  set(_gpufile_libdir "${CMAKE_INSTALL_PREFIX}/${GPUFILE_PC_LIBDIR}")
endif()
get_filename_component(_gpufile_real "${_gpufile_libdir}" REALPATH)
set(_gpufile_pc "${GPUFILE_PC_RPATH_FILE}")
foreach(_dir ${GPUFILE_PC_SYSTEM_DIRS})
  get_filename_component(_dir "${_dir}" REALPATH)
  if(_dir STREQUAL _gpufile_real)
    set(_gpufile_pc "${GPUFILE_PC_SYSTEM_FILE}")
  endif()
endforeach()
file(INSTALL DESTINATION "${_gpufile_libdir}/pkgconfig" TYPE FILE
  FILES "${_gpufile_pc}")
