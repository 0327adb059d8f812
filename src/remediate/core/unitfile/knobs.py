"""PURE: where an engine's knob cannot be read from the unit alone, refused by name rather than guessed.

vLLM's ``FlexibleArgumentParser`` keeps argparse's prefix matching (``--gpu-mem`` is
``--gpu-memory-utilization``) and reads a ``--config FILE.yaml`` under the command line
(vllm/utils/__init__.py ``_pull_args_from_config``): a flag the command line leaves unset may be the file's.
"""

from __future__ import annotations

from collections.abc import Sequence

from remediate.core.engines import SGLANG
from remediate.core.unitfile.argv import ArgItem, FlagHit
from remediate.core.unitfile.sources import Service
from remediate.errors import ConfigError, OwnedElsewhereError


def refuse_abbreviations(service: Service, items: Sequence[ArgItem]) -> None:
    """A word that abbreviates a knob the engine reads: which word holds the knob would be a guess."""
    for item in items:
        name = item.text[2:].partition("=")[0] if item.text.startswith("--") else ""
        if name and service.engine.abbreviates(name):
            raise ConfigError(
                f"{item.text} in {item.where} abbreviates a flag {service.engine.label} reads; write it in full",
                source=item.path,
            )


def refuse_config_owned(service: Service, configs: Sequence[FlagHit], flag: str, *, explicit: bool) -> None:
    """``--flag`` is unset on the command line but a ``--config`` file is named: its value there is not known,
    so only an explicit value may be written over it (sglang's --config is read before the command line too,
    but its unit files have always been edited on the command line alone: unchanged)."""
    if explicit or service.engine is SGLANG:
        return
    for config in configs:
        raise OwnedElsewhereError(f"--{flag}", f"--config {config.value_text} (not read)",
                                  source=service.exec_start.path)  # fmt: skip
