# Benchmarks of the sparse zstd walker (baselines: libzstd dense decode, with and without a
# nonzero scan, and the zero-stripe XXH64 floor, whose internal header it includes).
add_executable(walker_bench ${CMAKE_CURRENT_SOURCE_DIR}/walker_bench.cc)
target_include_directories(walker_bench PRIVATE ${CMAKE_SOURCE_DIR}/deltasync/src)
target_link_libraries(walker_bench PRIVATE deltakv_deltasync deltakv_warnings PkgConfig::ZSTD
                                           nlohmann_json::nlohmann_json)
# A small run in the test suite: it fails when the walker disagrees with libzstd or a figure is
# missing (bytes sink on Adam-like deltas; run sink on scattered ones).
if(DELTAKV_BUILD_TESTS)
  add_test(NAME walker_bench_smoke
           COMMAND walker_bench --size-mib 8 --slow-level-mib 2 --levels 1,19
                   --densities 0.005,0.025 --reps 1 --min-total-ms 0)
  add_test(NAME walker_bench_runs_smoke
           COMMAND walker_bench --size-mib 8 --levels 3 --densities 0.0005,0.025 --reps 1
                   --min-total-ms 0 --sink runs --shape scattered)
endif()
