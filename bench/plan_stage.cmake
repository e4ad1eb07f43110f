# Per-stage cost of the sync data path after the walk (layout mapping, plan records, plan
# transport, rank stage) per layout kind; baseline: XOR of the same runs into warm weights.
add_executable(plan_stage_bench ${CMAKE_CURRENT_SOURCE_DIR}/plan_stage_bench.cc)
target_link_libraries(plan_stage_bench PRIVATE deltakv_shim deltakv_deltasync deltakv_shm
                                               deltakv_warnings PkgConfig::ZSTD
                                               nlohmann_json::nlohmann_json)
# PlanSink, the planner's routing, is internal to deltasync.
target_include_directories(plan_stage_bench PRIVATE ${CMAKE_SOURCE_DIR}/deltasync/src)
