# replay tests: deltakv_add_test(... LIBS deltakv_kvsim)
deltakv_add_test(kvsim_replay_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/replay_test.cc
                 LIBS deltakv_kvsim)
deltakv_add_test(kvsim_report_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/report_test.cc
                 LIBS deltakv_kvsim nlohmann_json::nlohmann_json)
