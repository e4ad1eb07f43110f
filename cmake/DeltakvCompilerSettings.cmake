# Warnings, sanitizers and compiler caching shared by every deltakv target.
find_program(DELTAKV_CCACHE ccache)
if(DELTAKV_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_C_COMPILER_LAUNCHER ${DELTAKV_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${DELTAKV_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${DELTAKV_CCACHE})
endif()

add_library(deltakv_warnings INTERFACE)
target_compile_options(deltakv_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
     -Wimplicit-fallthrough -Wno-missing-field-initializers>)
if(DELTAKV_WERROR)
  target_compile_options(deltakv_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
# GCC 12 at -O3 reports -Wrestrict inside std::string's operator+ ("accessing 9223372036854775810
# or more bytes"), a known false positive of that release (fixed in GCC 13); Release builds
# with -Werror would fail on any string concatenation.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(deltakv_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
endif()

if(DELTAKV_SANITIZE)
  message(STATUS "deltakv: sanitizers ${DELTAKV_SANITIZE}")
  add_compile_options(-fsanitize=${DELTAKV_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${DELTAKV_SANITIZE})
endif()

if(DELTAKV_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "DELTAKV_BUILD_FUZZ needs clang (CC=clang CXX=clang++)")
  endif()
  # Instrument every library for coverage; fuzz executables add -fsanitize=fuzzer themselves.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
