"""`rollback` and `backups` on one host: the same transaction as `oom`, other bytes."""
