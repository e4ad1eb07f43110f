# Fuzz targets of the manifest parsers.
deltakv_add_fuzzer(manifest_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/manifest_fuzz.cc deltakv_deltasync)
deltakv_add_fuzzer(write_plan_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/write_plan_fuzz.cc deltakv_deltasync)
# The sidecar's group records, topology file and S3 XML answers. Seeds: corpus/sidecar_records/.
deltakv_add_fuzzer(sidecar_records_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/sidecar_records_fuzz.cc
                   deltakv_sidecar)
# A rank's staging of plan parts on host memory (the cpu backend's path, CopyOps and packed).
deltakv_add_fuzzer(plan_stage_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/plan_stage_fuzz.cc deltakv_shim)
target_include_directories(plan_stage_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/shim/src)  # backends.h
# The planner's pipelined decode against its single-thread decode, on in-memory deltas built
# from the input (libzstd compresses their frames). Seeds: corpus/planner_pipeline/.
deltakv_add_fuzzer(planner_pipeline_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/planner_pipeline_fuzz.cc
                   deltakv_deltasync PkgConfig::ZSTD)
target_include_directories(planner_pipeline_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/tests)
