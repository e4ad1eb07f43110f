# Fuzz targets of the sparse zstd walker.
