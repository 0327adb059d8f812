"""One host: the read → gate → edit → commit → wait → verify → undo transaction over a Transport, and the read-only
commands (status, diagnose, plan, backups, bench) on one host."""
