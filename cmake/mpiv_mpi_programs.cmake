# MPI programs built unmodified against MPIv's MPI face (src/mpi/), as
# mpivcc builds them: the face's mpi.h first on the include path,
# libmpiv-mpi and libmpiv linked. Run them with mpiv_run.
#
# mpiv_mpi_program(TARGET SOURCES src... [INCLUDES dirs...] [LIBS libs...])
function(mpiv_mpi_program target)
  cmake_parse_arguments(P "" "" "SOURCES;INCLUDES;LIBS" ${ARGN})
  add_executable(${target} ${P_SOURCES})
  target_include_directories(${target} PRIVATE ${P_INCLUDES})
  target_link_libraries(${target} PRIVATE mpiv_mpi Threads::Threads ${P_LIBS})
endfunction()

# mpiv_mpi_program_like(EXISTING [NAME target]): the program EXISTING (a
# target built against MPI, or against MPIv through a par_mpiv.c layer,
# which becomes par_mpi.c; a library with the property MPIV_MPIFACE_TWIN
# becomes that twin) once more on the face, as NAME (default
# EXISTING_mpiface): same sources, include directories and other
# libraries. One line per program, e.g. mpiv_mpi_program_like(bfs_expert).
function(mpiv_mpi_program_like existing)
  cmake_parse_arguments(P "" "NAME" "" ${ARGN})
  if(NOT P_NAME)
    set(P_NAME ${existing}_mpiface)
  endif()
  get_target_property(srcs ${existing} SOURCES)
  get_target_property(dir ${existing} SOURCE_DIR)
  get_target_property(incs ${existing} INCLUDE_DIRECTORIES)
  get_target_property(libs ${existing} LINK_LIBRARIES)
  set(abs "")
  foreach(s ${srcs})
    if(NOT IS_ABSOLUTE ${s})
      set(s ${dir}/${s})
    endif()
    string(REGEX REPLACE "par_mpiv\\.c$" "par_mpi.c" s ${s})
    list(APPEND abs ${s})
  endforeach()
  if(NOT incs)
    set(incs "")
  endif()
  if(NOT libs)
    set(libs "")
  endif()
  # a library that names a twin for the face (MPIV_MPIFACE_TWIN) gives
  # way to it, and the MPI (or MPIv) it was linked with to the face
  set(swapped "")
  foreach(l ${libs})
    if(TARGET ${l})
      get_target_property(twin ${l} MPIV_MPIFACE_TWIN)
      if(twin)
        set(l ${twin})
      endif()
    endif()
    list(APPEND swapped ${l})
  endforeach()
  set(libs ${swapped})
  list(FILTER libs EXCLUDE REGEX "^(mpiv|mpiv_static|Threads::Threads|PkgConfig::.*MPI.*|PkgConfig::APPS_MPICH|PkgConfig::APPS_OPENMPI)$")
  mpiv_mpi_program(${P_NAME} SOURCES ${abs} INCLUDES ${incs} LIBS ${libs})
endfunction()
