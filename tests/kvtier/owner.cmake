# The sidecar's KV pool owner: metrics of the pool-wide counters, NUMA and huge-page placement.
deltakv_add_test(kvtier_kv_pool_owner_test
                 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kv_pool_owner_test.cc
                 LIBS deltakv_sidecar deltakv_kvtier)
