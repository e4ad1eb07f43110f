# Fuzz targets of the manifest parsers.
deltakv_add_fuzzer(manifest_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/manifest_fuzz.cc deltakv_deltasync)
deltakv_add_fuzzer(write_plan_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/write_plan_fuzz.cc deltakv_deltasync)
