"""Sandbox GPU hosts for tests, the demo and benchmarks: real sshd per host, real systemd (systemd-nspawn --boot)."""

from __future__ import annotations

from sandbox.host import Sandbox, SandboxError, SandboxHost

__all__ = ["Sandbox", "SandboxError", "SandboxHost"]
