# The host KV tier C ABI (shim/include/deltakv/deltakv_kv.h): a C program that walks the whole
# API (built as C99 and as C11, to prove the header is valid C), error handling of every kind
# of bad input, and store/reload and SIGKILL across processes.

# The sidecar's side of the pool for the C program (creates the segment, reclaims).
add_library(deltakv_kv_test_pool STATIC ${CMAKE_CURRENT_SOURCE_DIR}/kv_test_pool.cc)
target_link_libraries(deltakv_kv_test_pool PUBLIC deltakv_kvtier PRIVATE deltakv_warnings)

foreach(c_std 99 11)
  set(name shim_kv_c_api_c${c_std}_test)
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/kv_c_api_c_test.c)
  set_target_properties(${name} PROPERTIES C_STANDARD ${c_std} C_STANDARD_REQUIRED ON
                                           C_EXTENSIONS OFF LINKER_LANGUAGE CXX)
  target_compile_options(${name} PRIVATE -Wall -Wextra -Wpedantic
                                         $<$<BOOL:${DELTAKV_WERROR}>:-Werror>)
  target_link_libraries(${name} PRIVATE deltakv_shim deltakv_kv_test_pool)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 120)
endforeach()

deltakv_add_test(shim_kv_c_api_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kv_c_api_test.cc
                 LIBS deltakv_shim deltakv_kvtier)
deltakv_add_test(shim_kv_c_api_multiprocess_test
                 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/kv_c_api_multiprocess_test.cc
                 LIBS deltakv_shim deltakv_kvtier)
