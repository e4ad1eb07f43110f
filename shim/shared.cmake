# libdeltakv.so: the engine library as a shared object with a versioned SONAME that exports only
# the deltakv_* C symbols (export/deltakv.map), for engines built outside this tree.
add_library(deltakv_shared SHARED ${CMAKE_CURRENT_SOURCE_DIR}/src/shared_library.cc)
target_link_libraries(deltakv_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,deltakv_shim>"
                                             deltakv_kvtier deltakv_warnings)
target_include_directories(deltakv_shared PUBLIC
  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
target_link_options(deltakv_shared PRIVATE
  "-Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/export/deltakv.map")
if(NOT DELTAKV_SANITIZE AND NOT DELTAKV_BUILD_FUZZ)  # sanitizer runtimes resolve at load time
  target_link_options(deltakv_shared PRIVATE "-Wl,--no-undefined")
endif()
set_target_properties(deltakv_shared PROPERTIES
  OUTPUT_NAME deltakv EXPORT_NAME deltakv
  VERSION ${PROJECT_VERSION} SOVERSION ${DELTAKV_ABI_VERSION}
  LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/export/deltakv.map)
