# Per-stage cost of the sync data path after the walk (layout mapping, plan records, plan
# transport, rank stage) per layout kind; baseline: XOR of the same runs into warm weights.
add_executable(plan_stage_bench ${CMAKE_CURRENT_SOURCE_DIR}/plan_stage_bench.cc)
target_link_libraries(plan_stage_bench PRIVATE deltakv_shim deltakv_deltasync deltakv_shm
                                               deltakv_warnings PkgConfig::ZSTD
                                               nlohmann_json::nlohmann_json)
# PlanSink, the planner's routing, is internal to deltasync.
target_include_directories(plan_stage_bench PRIVATE ${CMAKE_SOURCE_DIR}/deltasync/src)
# A small run in the test suite: it fails when a stage's output disagrees with the planner's
# reference, the staged bytes or sums are wrong, or a figure is missing.
if(DELTAKV_BUILD_TESTS)
  add_test(NAME plan_stage_bench_smoke COMMAND plan_stage_bench --size-mib 2 --reps 1 --part-mib 1)
endif()
