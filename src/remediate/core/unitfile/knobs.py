"""PURE: where an engine's knob cannot be read from the unit alone, refused by name rather than guessed.

vLLM's ``FlexibleArgumentParser`` keeps argparse's prefix matching (``--gpu-mem`` is
``--gpu-memory-utilization``) and reads a ``--config FILE.yaml`` under the command line
(vllm/utils/__init__.py ``_pull_args_from_config``): a flag the command line leaves unset may be the file's.
"""

from __future__ import annotations

from collections.abc import Sequence

from remediate.core.unitfile.argv import ArgItem, FlagHit, find_flags
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
    if explicit or not service.engine.guards_config_knobs:
        return
    if service.config is not None and service.config.words is not None:
        return  # the file was read and does not set it: the engine's default holds
    for config in configs:
        why = service.config.unread if service.config is not None else "not read"
        raise OwnedElsewhereError(f"--{flag}", f"--config {config.value_text} ({why})",
                                  source=service.exec_start.path)  # fmt: skip


# sglang's decode graph batch flag in each version's spelling: 0.5.5 server_args.py ServerArgs.add_cli_args
# ("--cuda-graph-max-bs"); 0.5.23 arg_groups/fields/exec_.py ExecConfig (cuda_graph_max_bs_decode/_prefill only).
_NEW_GRAPH = ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill")
_OLD_GRAPH = "--cuda-graph-max-bs"


def graph_flag_written(items: Sequence[ArgItem]) -> tuple[str, int | None] | None:
    """The decode graph batch flag in the spelling the unit already writes (its sglang accepts it, or it would
    not start) and its value: ``--cuda-graph-max-bs-decode`` where a split flag is written (the decode one's
    value), ``--cuda-graph-max-bs`` where the old one is; None when the unit writes neither (its version is not
    told by the unit)."""
    found: dict[str, int | None] = {}
    for index, item in enumerate(items):
        name, eq, value = item.text.partition("=")
        if name in (*_NEW_GRAPH, _OLD_GRAPH):
            if not eq:
                value = items[index + 1].text if index + 1 < len(items) else ""
            found[name] = int(value) if value.isdigit() else None
    if any(name in found for name in _NEW_GRAPH):
        return _NEW_GRAPH[0], found.get(_NEW_GRAPH[0])
    if _OLD_GRAPH in found:
        return _OLD_GRAPH, found[_OLD_GRAPH]
    return None


def refuse_kv_bytes(service: Service, items: Sequence[ArgItem]) -> None:
    """A unit that sizes its KV cache in bytes (vLLM's ``--kv-cache-memory-bytes``): its fraction sizes nothing,
    so the recipe is refused."""
    engine = service.engine
    if engine.kv_bytes_flag is None or engine.kv_bytes_refusal is None:
        return
    hits = find_flags(items, engine.kv_bytes_flag, resolve=engine.resolve_flag, bool_flags=engine.bool_flags)
    if hits and hits[-1].value_text is not None:
        raise ConfigError(engine.kv_bytes_refusal(hits[-1].value_text), source=service.exec_start.path)
