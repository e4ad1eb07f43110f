# The end-to-end live sync benchmark (bench/sync_bench.py: the real sidecar and demo engine). A
# small run in the test suite: it fails when a sync does not go live, a figure or a baseline is
# missing, or the synced bytes differ from the new checkpoint's (--check-bytes).
if(DELTAKV_BUILD_TESTS)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  add_test(NAME sync_bench_smoke
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/sync_bench.py
                   --deltakv $<TARGET_FILE:deltakv> --engine $<TARGET_FILE:deltakv-demo-engine>
                   --size-mib 64 --densities 0.01 --tp 1,2 --decode-threads 1 --sequences runs,zstd
                   --check-bytes)
  set_tests_properties(sync_bench_smoke PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
endif()
