# Benchmarks of the KV slot pool (baseline: plain memcpy of the same bytes).
add_executable(kv_pool_bench ${CMAKE_CURRENT_SOURCE_DIR}/kv_pool_bench.cc)
target_link_libraries(kv_pool_bench PRIVATE deltakv_kvtier deltakv_warnings
                                            nlohmann_json::nlohmann_json Threads::Threads)
