# Formats and checksums (safetensors, dtype, Adler-32).
deltakv_add_test(adler32_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/adler32_test.cc
                 LIBS deltakv_deltasync ZLIB::ZLIB)
deltakv_add_test(safetensors_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_test.cc
                 LIBS deltakv_deltasync ZLIB::ZLIB)
