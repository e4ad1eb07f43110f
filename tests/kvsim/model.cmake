# model tests: deltakv_add_test(... LIBS deltakv_kvsim)
