"""PURE: one folder per server engine (vllm/ today; sglang's readers still live in core/unitfile, core/startup)."""
