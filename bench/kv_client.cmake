# Store/reload throughput through KvTierClient (baseline: plain memcpy of the same bytes).
add_executable(kv_client_bench ${CMAKE_CURRENT_SOURCE_DIR}/kv_client_bench.cc)
target_link_libraries(kv_client_bench PRIVATE deltakv_kvtier deltakv_warnings
                                              nlohmann_json::nlohmann_json Threads::Threads)

# The C ABI client's store/reload loop, the baseline of python_kv_bench.py.
add_executable(kv_c_roundtrip ${CMAKE_CURRENT_SOURCE_DIR}/kv_c_roundtrip.c)
target_link_libraries(kv_c_roundtrip PRIVATE deltakv_shared)
