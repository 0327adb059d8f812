"""PURE: the budget domain behind ``remediate plan`` and ``oom --auto`` — sglang's KV-pool arithmetic.

``pool`` models how sglang sizes its KV pool for any ``--mem-fraction-static`` (and calibrates that model
against what a server reported), ``headroom`` turns a diagnosed prefill spike into the largest fraction that
still leaves it room, and ``observation`` is the calibration record one healthy start leaves behind (its
tolerant parser; the file itself is read and written by the host layer). No I/O, no clock, no environment.
"""
