# The cuda backend's tests (run on a GPU by tools/device-check.sh; skipped without a device).
if(DELTAKV_HAVE_CUDA)
  deltakv_add_test(cuda_backend_test SOURCES cuda_backend_test.cc LIBS deltakv_shim deltakv_deltasync)
endif()
