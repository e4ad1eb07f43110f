# Benchmarks of the host KV tier (docs/KEYS.md key hashing; baseline: plain digests per block).
add_executable(kv_keys_bench ${CMAKE_CURRENT_SOURCE_DIR}/kv_keys_bench.cc)
target_link_libraries(kv_keys_bench PRIVATE deltakv_kvtier deltakv_warnings PkgConfig::XXHASH
                                            OpenSSL::Crypto nlohmann_json::nlohmann_json)
target_include_directories(kv_keys_bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
