"""PURE: the bench domain behind ``remediate bench`` — the long-context sweep and what it measures.

``sweep`` chooses the lengths, builds exact prompts and applies the skip rules, ``stream`` decodes sglang's
streaming ``/generate`` (server-sent events), ``latency`` turns one stream into per-request metrics and
summaries the way sglang's ``bench_serving`` computes them, and ``record`` shapes the JSONL and CSV rows a run
writes. No I/O, no clock, no environment: arrival times and seeds come in as arguments.
"""
