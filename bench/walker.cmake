# Benchmarks of the sparse zstd walker (baseline: libzstd decompress + nonzero scan).
add_executable(walker_bench ${CMAKE_CURRENT_SOURCE_DIR}/walker_bench.cc)
target_link_libraries(walker_bench PRIVATE deltakv_deltasync deltakv_warnings PkgConfig::ZSTD
                                           nlohmann_json::nlohmann_json)
