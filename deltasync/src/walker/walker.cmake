# Sources of the sparse zstd walker, added to deltakv_deltasync.
