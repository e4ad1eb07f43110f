# replay sources: target_sources(deltakv_kvsim PRIVATE ...)
