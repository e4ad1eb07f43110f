# traces sources: target_sources(deltakv_kvsim PRIVATE ...)
target_sources(deltakv_kvsim PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/trace_common.cc)
