"""A stdlib-only stand-in for sglang 0.5.x's HTTP server (see sandbox/standin/README.md)."""

__version__ = "0.5.6"
