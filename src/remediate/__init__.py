"""remediate: safe, verified, idempotent remediation of sglang servers on GPU hosts."""

from __future__ import annotations

__version__ = "0.1.0"
