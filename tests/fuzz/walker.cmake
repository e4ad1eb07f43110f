# Fuzz targets of the sparse zstd walker. Seeds: corpus/walker.
deltakv_add_fuzzer(walker_differential_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/walker_differential_fuzz.cc
                   deltakv_deltasync PkgConfig::ZSTD)
target_include_directories(walker_differential_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/tests)
deltakv_add_fuzzer(walker_crash_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/walker_crash_fuzz.cc
                   deltakv_deltasync)
deltakv_add_fuzzer(walker_sparse_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/walker_sparse_fuzz.cc
                   deltakv_deltasync PkgConfig::ZSTD)
# deltasync/src: the publisher's XOR-run sequence parse (xor_sequences.h).
target_include_directories(walker_sparse_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/tests
                                                      ${CMAKE_SOURCE_DIR}/deltasync/src)
