# Benchmarks of the sparse zstd walker (baselines: libzstd dense decode, with and without a
# nonzero scan, and the zero-stripe XXH64 floor, whose internal header it includes).
add_executable(walker_bench ${CMAKE_CURRENT_SOURCE_DIR}/walker_bench.cc)
target_include_directories(walker_bench PRIVATE ${CMAKE_SOURCE_DIR}/deltasync/src)
target_link_libraries(walker_bench PRIVATE deltakv_deltasync deltakv_warnings PkgConfig::ZSTD
                                           nlohmann_json::nlohmann_json)
