# Manifests, publisher, applier, decoders.
deltakv_add_test(delta_roundtrip_test SOURCES delta_roundtrip_test.cc LIBS deltakv_deltasync)
deltakv_add_test(delta_reject_test SOURCES delta_reject_test.cc
                 LIBS deltakv_deltasync nlohmann_json::nlohmann_json)
