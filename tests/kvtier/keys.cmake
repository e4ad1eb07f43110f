# Key tests: the docs/KEYS.md vectors, properties, hex parsing.
deltakv_add_test(keys_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/keys_test.cc LIBS deltakv_kvtier)

# The independent Python reference regenerates the vectors and compares them with docs/KEYS.md
# and keys_test.cc; it exits 77 (skipped) when the `xxhash` package is not importable.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME keys_reference_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/keys_reference.py
                   --check-spec ${CMAKE_SOURCE_DIR}/docs/KEYS.md
                   --check-test ${CMAKE_CURRENT_SOURCE_DIR}/keys_test.cc)
  set_tests_properties(keys_reference_test PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
else()
  message(STATUS "deltakv: python3 not found; keys_reference_test not registered")
endif()
