# Tier API tests: copy engine, KV layouts, KvTierClient (single and multi-process).
deltakv_add_test(kvtier_copy_engine_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/copy_engine_test.cc
                 LIBS deltakv_kvtier)
deltakv_add_test(kvtier_kv_layout_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kv_layout_test.cc
                 LIBS deltakv_kvtier)
deltakv_add_test(kvtier_tier_client_test
                 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tier_client_test.cc
                 LIBS deltakv_kvtier)
deltakv_add_test(kvtier_tier_client_multiprocess_test
                 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tier_client_multiprocess_test.cc
                 LIBS deltakv_kvtier)
