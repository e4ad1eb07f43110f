# traces tests: deltakv_add_test(... LIBS deltakv_kvsim)
deltakv_add_test(kvsim_trace_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trace_test.cc
                 LIBS deltakv_kvsim)
# The theoretical hit rate against aiperf's implementation (a Python venv with PyPI aiperf,
# made by scripts/setup-deps.sh; the test is skipped when it is missing).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
if(DEFINED ENV{DELTAKV_AIPERF_VENV})
  set(_aiperf_venv "$ENV{DELTAKV_AIPERF_VENV}")
else()
  set(_aiperf_venv "$ENV{HOME}/.cache/deltakv-venvs/aiperf")
endif()
set(DELTAKV_AIPERF_PYTHON "${_aiperf_venv}/bin/python" CACHE FILEPATH "Python of a venv with aiperf")
add_test(NAME kvsim_aiperf_theoretical
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/aiperf_theoretical_test.py
                 --deltakv $<TARGET_FILE:deltakv> --python-aiperf ${DELTAKV_AIPERF_PYTHON}
                 --workdir ${CMAKE_CURRENT_BINARY_DIR}/aiperf_work)
set_tests_properties(kvsim_aiperf_theoretical PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
