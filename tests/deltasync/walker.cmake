# Tests of the sparse zstd walker.
foreach(walker_test_name walker_differential_test walker_golden_test walker_stream_test
                         walker_unit_test xor_sequences_test)
  deltakv_add_test(${walker_test_name}
                   SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/${walker_test_name}.cc
                   LIBS deltakv_deltasync PkgConfig::ZSTD)
endforeach()
target_compile_definitions(walker_golden_test
                           PRIVATE DELTAKV_WALKER_TESTDATA="${CMAKE_CURRENT_SOURCE_DIR}/data/zstd")
# White-box tests of the walker's internals (XXH64, nonzero index, bit reader).
target_include_directories(walker_unit_test PRIVATE ${CMAKE_SOURCE_DIR}/deltasync/src)
# The publisher's XOR-run sequence parse (internal).
target_include_directories(xor_sequences_test PRIVATE ${CMAKE_SOURCE_DIR}/deltasync/src)
