"""I/O: storage access (local disk and fsspec URLs) and file tailing with cursors."""
