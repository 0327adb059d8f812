"""PURE: vLLM's command line, startup and failure lines, and its KV-cache sizing, read from vLLM's own formats."""
