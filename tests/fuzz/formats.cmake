# Formats and checksums (safetensors, dtype, Adler-32).
# Seeds: corpus/safetensors/; dictionary: safetensors.dict.
deltakv_add_fuzzer(safetensors_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_fuzz.cc deltakv_deltasync)
