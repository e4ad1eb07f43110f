# Tensor layout descriptors (TP/EP sharding, fused parts) against a materializing reference.
deltakv_add_test(layout_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/layout_test.cc
                 LIBS deltakv_deltasync)
