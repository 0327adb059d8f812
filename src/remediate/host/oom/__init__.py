"""`oom` on one host: read → gate → edit plan → transact → verify."""
