# Publish / apply benchmark.
add_executable(delta_bench ${CMAKE_CURRENT_SOURCE_DIR}/delta_bench.cc)
target_link_libraries(delta_bench PRIVATE deltakv_deltasync deltakv_warnings CLI11::CLI11
                                          nlohmann_json::nlohmann_json)
