# Store/reload throughput through KvTierClient (baseline: plain memcpy of the same bytes).
add_executable(kv_client_bench ${CMAKE_CURRENT_SOURCE_DIR}/kv_client_bench.cc)
target_link_libraries(kv_client_bench PRIVATE deltakv_kvtier deltakv_warnings
                                              nlohmann_json::nlohmann_json Threads::Threads)
