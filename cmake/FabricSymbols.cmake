# libmpiv loads libfabric only when its ofi backend starts (src/server/ofi.c
# says why), and then binds the five libfabric functions it calls with
# dlvsym. The symbol versions must be the ones a plain link against this
# libfabric picks, so that the library's structs match the headers we
# compile against: a probe linked the plain way is read back here.
# Sets MPIV_FABRIC_DEFINITIONS: MPIV_FI_<NAME>_VERSION (empty for a
# libfabric without symbol versions: plain dlsym then), MPIV_FABRIC_SONAME
# (the name the link recorded: libfabric 2.x still calls itself
# libfabric.so.1) and MPIV_FABRIC_LIBDIR (where pkg-config found it).
set(_dir ${CMAKE_BINARY_DIR}/fabric_probe)
file(MAKE_DIRECTORY ${_dir})
file(WRITE ${_dir}/probe.c [=[
#include <rdma/fabric.h>
int main(void)
{
    struct fi_info *i = fi_dupinfo(0);
    fi_freeinfo(i);
    struct fid_fabric *f = 0;
    return fi_getinfo(FI_VERSION(1, 9), 0, 0, 0, 0, &i) + fi_fabric(0, &f, 0) + (fi_strerror(0) != 0);
}
]=])
try_compile(_fabric_probe_ok ${_dir}/build SOURCES ${_dir}/probe.c
  LINK_LIBRARIES PkgConfig::FABRIC
  OUTPUT_VARIABLE _fabric_probe_log
  COPY_FILE ${_dir}/probe)
if(NOT _fabric_probe_ok)
  message(FATAL_ERROR "could not link a probe against libfabric:\n${_fabric_probe_log}")
endif()
find_program(MPIV_READELF NAMES readelf REQUIRED)
execute_process(COMMAND ${MPIV_READELF} --dyn-syms -W ${_dir}/probe
  OUTPUT_VARIABLE _fabric_syms RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "readelf failed on the libfabric probe")
endif()
set(MPIV_FABRIC_DEFINITIONS "")
foreach(fn getinfo freeinfo dupinfo fabric strerror)
  string(TOUPPER ${fn} _up)
  if(_fabric_syms MATCHES "fi_${fn}@+([A-Za-z0-9_.]+)")
    set(_ver ${CMAKE_MATCH_1})
  elseif(_fabric_syms MATCHES "fi_${fn}[ \n]")
    set(_ver "") # a libfabric without symbol versions
  else()
    message(FATAL_ERROR "libfabric probe: no fi_${fn} in\n${_fabric_syms}")
  endif()
  list(APPEND MPIV_FABRIC_DEFINITIONS "MPIV_FI_${_up}_VERSION=\"${_ver}\"")
  message(STATUS "libfabric: fi_${fn}@${_ver}")
endforeach()
execute_process(COMMAND ${MPIV_READELF} -d -W ${_dir}/probe OUTPUT_VARIABLE _fabric_dyn)
if(NOT _fabric_dyn MATCHES "\\[(libfabric\\.so[^]]*)\\]")
  message(FATAL_ERROR "libfabric probe: no libfabric among its NEEDED libraries:\n${_fabric_dyn}")
endif()
set(_soname ${CMAKE_MATCH_1})
list(APPEND MPIV_FABRIC_DEFINITIONS "MPIV_FABRIC_SONAME=\"${_soname}\""
  "MPIV_FABRIC_LIBDIR=\"${FABRIC_LIBDIR}\"")
message(STATUS "libfabric: ${_soname} in ${FABRIC_LIBDIR}")
