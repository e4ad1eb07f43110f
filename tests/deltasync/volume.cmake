# Sealed volumes: formats, stores, push/pull/tag/rm, gc, parent-XOR chunks.
deltakv_add_test(volume_test
                 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/volume_format_test.cc
                         ${CMAKE_CURRENT_SOURCE_DIR}/volume_store_test.cc
                         ${CMAKE_CURRENT_SOURCE_DIR}/volume_push_pull_test.cc
                         ${CMAKE_CURRENT_SOURCE_DIR}/volume_gc_test.cc
                         ${CMAKE_CURRENT_SOURCE_DIR}/volume_xor_test.cc
                 LIBS deltakv_deltasync Threads::Threads)
# Sealed volumes from plain sources: Volumes::PushFrom against Push, faults, bad listings.
deltakv_add_test(volume_push_from_test
                 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/volume_push_from_test.cc
                 LIBS deltakv_deltasync Threads::Threads)
