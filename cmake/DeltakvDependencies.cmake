# Every dependency comes from the system's package manager (scripts/setup-deps.sh).
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd>=1.5)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(Threads REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
if(DELTAKV_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(ZLIB REQUIRED)  # independent Adler-32 reference for differential tests
endif()
if(DELTAKV_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
