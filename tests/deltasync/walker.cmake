# Tests of the sparse zstd walker.
