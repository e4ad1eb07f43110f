# The AgentX replay: its speed, the real pool's rate inside it, hit vs theoretical.
add_executable(agentx_replay_bench ${CMAKE_CURRENT_SOURCE_DIR}/agentx_replay_bench.cc)
target_link_libraries(agentx_replay_bench PRIVATE deltakv_kvsim deltakv_kvtier deltakv_warnings
                                                  nlohmann_json::nlohmann_json)
