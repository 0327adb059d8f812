"""`plan` on one host: its capacity evidence → the model → a choice (sglang's and vLLM's), `oom --auto`'s step, and
the calibration record a healthy start leaves."""
