"""Unit files for sandbox hosts, derived from the incident's unit (examples/incident/sglang.service)."""

from __future__ import annotations

from pathlib import Path

INCIDENT = Path(__file__).resolve().parent.parent / "examples" / "incident" / "sglang.service"


def incident_unit(listen: str | None = None) -> str:
    """The incident's unit, runnable on a sandbox host.

    Sandbox hosts have no ``sglang`` user, so ``User=``/``Group=`` go; everything else is the incident's
    unit byte for byte. Hosts share the machine's network namespace, so when several run a server at
    once each must listen on its own address: pass ``listen=host.address`` to replace ``--host 0.0.0.0``.
    """
    text = INCIDENT.read_text()
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(("User=", "Group=")))
    if listen:
        text = text.replace("--host 0.0.0.0", f"--host {listen}")
    return text
