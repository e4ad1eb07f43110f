# replay tests: deltakv_add_test(... LIBS deltakv_kvsim)
deltakv_add_test(kvsim_replay_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/replay_test.cc
                 LIBS deltakv_kvsim)
deltakv_add_test(kvsim_report_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/report_test.cc
                 LIBS deltakv_kvsim nlohmann_json::nlohmann_json)
deltakv_add_test(kvsim_gpu_prefix_cache_test
                 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gpu_prefix_cache_test.cc LIBS deltakv_kvsim)
target_include_directories(kvsim_gpu_prefix_cache_test PRIVATE ${CMAKE_SOURCE_DIR}/kvsim/src)
