# Key spec sources (docs/KEYS.md): target_sources(deltakv_kvtier PRIVATE ...)
target_sources(deltakv_kvtier PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/keys.cc
                                      ${CMAKE_CURRENT_SOURCE_DIR}/src/keys_hex.cc)
