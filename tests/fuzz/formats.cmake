# Formats and checksums (safetensors, dtype, Adler-32).
# Seeds: corpus/safetensors/; dictionary: safetensors.dict.
deltakv_add_fuzzer(safetensors_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_fuzz.cc deltakv_deltasync)
# Engine tensor tables and layout descriptors (JSON). Seeds: corpus/engine_tables/.
deltakv_add_fuzzer(engine_tables_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/engine_tables_fuzz.cc deltakv_deltasync)
# The shared-memory message codec. Seeds: corpus/messages/.
deltakv_add_fuzzer(messages_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/messages_fuzz.cc deltakv_shm)
# The sidecar's checksum table (state dir JSON). Seeds: corpus/checksum_table/.
deltakv_add_fuzzer(checksum_table_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/checksum_table_fuzz.cc deltakv_sidecar)
# Sealed-volume manifests and references. Seeds: corpus/volume/.
deltakv_add_fuzzer(volume_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/volume_fuzz.cc deltakv_deltasync)
