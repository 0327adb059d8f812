"""`diagnose` on one host, the crash evidence `oom`'s gate reads, and a saved journal read in place of a host."""
