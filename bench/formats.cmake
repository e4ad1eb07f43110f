# Formats and checksums (safetensors, dtype, Adler-32).
