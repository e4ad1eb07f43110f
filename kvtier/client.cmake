# Engine-facing tier API: copy engine (cpu), engine KV layouts, KvTierClient.
target_sources(deltakv_kvtier PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/copy_engine.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/kv_layout.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/tier_client.cc)
