# Slot pool / index sources: target_sources(deltakv_kvtier PRIVATE ...)
target_sources(deltakv_kvtier PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/pool_layout.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/block_index.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/eviction_policy.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/slot_pool.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/host_memory.cc)
