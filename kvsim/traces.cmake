target_sources(deltakv_kvsim PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/trace_common.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/trace_json.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/trace_weka.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/trace_mooncake.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/trace_corpus.cc)
target_sources(deltakv_kvsim PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/synthetic.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/theoretical_hit.cc)
