# (sources of the slot pool and index land here)
