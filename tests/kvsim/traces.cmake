# traces tests: deltakv_add_test(... LIBS deltakv_kvsim)
deltakv_add_test(kvsim_trace_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trace_test.cc
                 LIBS deltakv_kvsim)
