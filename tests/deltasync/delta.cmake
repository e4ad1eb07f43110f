# Manifests, publisher, applier, decoders.
deltakv_add_test(delta_roundtrip_test SOURCES delta_roundtrip_test.cc LIBS deltakv_deltasync)
deltakv_add_test(delta_reject_test SOURCES delta_reject_test.cc
                 LIBS deltakv_deltasync nlohmann_json::nlohmann_json)
deltakv_add_test(manifest_test SOURCES manifest_test.cc
                 LIBS deltakv_deltasync nlohmann_json::nlohmann_json)
deltakv_add_test(libzstd_decoder_test SOURCES libzstd_decoder_test.cc
                 LIBS deltakv_deltasync PkgConfig::ZSTD)
deltakv_add_test(format_vectors_test SOURCES format_vectors_test.cc LIBS deltakv_deltasync)
target_compile_definitions(format_vectors_test PRIVATE
                           DELTAKV_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
deltakv_add_test(write_plan_test SOURCES write_plan_test.cc LIBS deltakv_deltasync)
deltakv_add_test(xor_digest_test SOURCES xor_digest_test.cc LIBS deltakv_deltasync PkgConfig::ZSTD)
deltakv_add_test(plan_sink_test SOURCES plan_sink_test.cc LIBS deltakv_deltasync)
target_include_directories(plan_sink_test PRIVATE ${CMAKE_SOURCE_DIR}/deltasync/src)
