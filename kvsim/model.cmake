target_sources(deltakv_kvsim PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/model_spec.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/presets.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/capacity.cc)
