# Benchmarks of the sparse zstd walker.
