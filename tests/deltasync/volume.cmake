# Sealed volumes: refs, manifests, chunking, the directory store, push/pull/tag/rm/gc.
deltakv_add_test(volume_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/volume_test.cc
                 LIBS deltakv_deltasync Threads::Threads)
