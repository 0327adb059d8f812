"""PURE: the engine seam — one folder per server family, each building one
:class:`~remediate.core.engines.base.Engine`, registered here by name.

sglang's readers still live where they grew (core/unitfile, core/startup.py, core/diagnosis/) and
``sglang/engine.py`` wraps them; ``vllm/`` holds vLLM's own. Which engine a unit runs is read from the
``ExecStart=`` systemd loaded (core/unitfile/engine.py ``read_engine``); a third engine is a new folder and
one line below (and its entry point in core/unitfile/command.py's ``_ENTRIES``).
"""

from __future__ import annotations

from collections.abc import Mapping

from remediate.core.engines.base import Engine, Verdict
from remediate.core.engines.sglang.engine import SGLANG
from remediate.core.engines.vllm.engine import VLLM

ENGINES: Mapping[str, Engine] = {engine.name: engine for engine in (SGLANG, VLLM)}
DEFAULT = SGLANG

__all__ = ["DEFAULT", "ENGINES", "SGLANG", "VLLM", "Engine", "Verdict", "engine_named"]


def engine_named(name: str | None) -> Engine:
    """The registered engine called ``name`` (None: sglang, the default)."""
    return DEFAULT if name is None else ENGINES[name]
