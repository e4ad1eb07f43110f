# GPU benchmarks (built with CUDA; run on a GPU machine by tools/device-check.sh).
if(DELTAKV_HAVE_CUDA)
  add_executable(gpu_scatter_bench ${CMAKE_CURRENT_SOURCE_DIR}/gpu_scatter_bench.cc)
  target_link_libraries(gpu_scatter_bench PRIVATE deltakv_shim deltakv_warnings
                                                  CLI11::CLI11 nlohmann_json::nlohmann_json)
endif()
