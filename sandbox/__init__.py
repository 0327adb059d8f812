"""Sandbox GPU hosts for tests, the demo and benchmarks: real sshd per host, daemon-less systemd."""

from __future__ import annotations

from sandbox.host import Sandbox, SandboxError, SandboxHost

__all__ = ["Sandbox", "SandboxError", "SandboxHost"]
