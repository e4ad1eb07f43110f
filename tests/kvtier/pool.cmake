# Pool / index tests
deltakv_add_test(kvtier_pool_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/pool_test.cc
                 LIBS deltakv_kvtier)
deltakv_add_test(kvtier_pool_multiprocess_test
                 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/pool_multiprocess_test.cc
                 LIBS deltakv_kvtier)
