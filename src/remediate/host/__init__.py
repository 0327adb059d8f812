"""One host: the read → plan → commit → wait → verify → undo transaction over a Transport."""
