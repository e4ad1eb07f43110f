# kvsim parsers: deltakv_add_fuzzer(<name> <source> deltakv_kvsim)
