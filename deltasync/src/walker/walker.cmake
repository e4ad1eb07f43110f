# Sources of the sparse zstd walker, added to deltakv_deltasync.
target_sources(deltakv_deltasync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bit_reader.h
  ${CMAKE_CURRENT_LIST_DIR}/block_decoder.cc
  ${CMAKE_CURRENT_LIST_DIR}/frame_header.cc
  ${CMAKE_CURRENT_LIST_DIR}/frame_output.cc
  ${CMAKE_CURRENT_LIST_DIR}/fse_table.cc
  ${CMAKE_CURRENT_LIST_DIR}/huffman.cc
  ${CMAKE_CURRENT_LIST_DIR}/literals.cc
  ${CMAKE_CURRENT_LIST_DIR}/nonzero_index.cc
  ${CMAKE_CURRENT_LIST_DIR}/run_emitter.h
  ${CMAKE_CURRENT_LIST_DIR}/sequences.cc
  ${CMAKE_CURRENT_LIST_DIR}/xxh64.cc
  ${CMAKE_CURRENT_LIST_DIR}/zstd_walker.cc
)
