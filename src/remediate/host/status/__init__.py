"""`status` on one host: read-only, the same read as `oom`."""
