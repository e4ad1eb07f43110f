# Formats and checksums (safetensors, dtype, Adler-32).
find_package(ZLIB REQUIRED)  # zlib's adler32 is the baseline of adler32_bench
add_executable(adler32_bench ${CMAKE_CURRENT_SOURCE_DIR}/adler32_bench.cc)
target_link_libraries(adler32_bench PRIVATE deltakv_deltasync deltakv_warnings ZLIB::ZLIB)
target_compile_definitions(adler32_bench PRIVATE DELTAKV_BUILD_TYPE="$<CONFIG>")
