# replay sources: target_sources(deltakv_kvsim PRIVATE ...)
target_sources(deltakv_kvsim PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/cost_model.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/cost_model_derive.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/gpu_prefix_cache.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/host_tier.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/replay.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/report.cc)
