# model tests: deltakv_add_test(... LIBS deltakv_kvsim)
deltakv_add_test(kvsim_model_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/model_test.cc
                 LIBS deltakv_kvsim nlohmann_json::nlohmann_json)
