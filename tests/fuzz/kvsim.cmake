# kvsim parsers. Seeds: corpus/trace/ (Weka and Mooncake files), corpus/hf_config/.
deltakv_add_fuzzer(trace_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/trace_fuzz.cc deltakv_kvsim)
deltakv_add_fuzzer(hf_config_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/hf_config_fuzz.cc deltakv_kvsim)
