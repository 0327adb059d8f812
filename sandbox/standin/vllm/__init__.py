"""A fake vLLM 0.11 OpenAI server for sandbox hosts (stdlib only; see sandbox/README.md, "vLLM stand-in")."""
