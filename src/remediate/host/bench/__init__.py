"""`bench` on one host (read-only) and `oom --probe`'s prefill request."""
