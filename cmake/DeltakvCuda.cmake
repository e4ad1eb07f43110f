# DELTAKV_CUDA: AUTO turns CUDA on when nvcc is found; ON requires it; OFF skips it.
# Debian's CMake 3.25 does not know nvcc 13's flag for C++20 (CUDA targets inherit C++20 from
# CMAKE_CXX_STANDARD), so it is taught here.
set(DELTAKV_HAVE_CUDA OFF)
if(NOT DELTAKV_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)  # CUDA::cudart for host code that calls the runtime
    set(DELTAKV_HAVE_CUDA ON)
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
  elseif(DELTAKV_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DELTAKV_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "deltakv: CUDA backends ${DELTAKV_HAVE_CUDA}")
add_library(deltakv_cuda_settings INTERFACE)
if(DELTAKV_HAVE_CUDA)
  # nvcc's own diagnostics are errors, except 2810: its front end reports assigning a value of
  # a [[nodiscard]] type (Status s = ...; s = f();) as ignoring the return value.
  target_compile_options(deltakv_cuda_settings INTERFACE
                         $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -diag-suppress=2810>)
endif()
