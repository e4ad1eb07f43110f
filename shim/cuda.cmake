# The cuda device backend (shim/src/cuda_backend.cu), built when CUDA is on (DELTAKV_CUDA), as an
# object library with only the include paths it needs.
if(DELTAKV_HAVE_CUDA)
  add_library(deltakv_shim_cuda OBJECT src/cuda_backend.cu)
  target_include_directories(deltakv_shim_cuda PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src
    $<TARGET_PROPERTY:deltakv_base,INTERFACE_INCLUDE_DIRECTORIES>
    ${PROJECT_SOURCE_DIR}/deltasync/include)
  target_compile_definitions(deltakv_shim_cuda PRIVATE DELTAKV_HAVE_CUDA)
  target_link_libraries(deltakv_shim_cuda PRIVATE deltakv_cuda_settings CUDA::toolkit)
  # Engines run on whatever GPU they are given: Ampere and Hopper code, plus PTX for newer.
  # No CXX_STANDARD: CMake would derive a CUDA dialect from it that it cannot express for nvcc.
  set_target_properties(deltakv_shim_cuda PROPERTIES CUDA_ARCHITECTURES "80-real;90")
  target_sources(deltakv_shim PRIVATE $<TARGET_OBJECTS:deltakv_shim_cuda>)
  target_compile_definitions(deltakv_shim PRIVATE DELTAKV_HAVE_CUDA)
  target_link_libraries(deltakv_shim PUBLIC CUDA::cudart_static)
endif()
