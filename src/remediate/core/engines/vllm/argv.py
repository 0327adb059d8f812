"""PURE: read a vLLM server's command line the way vLLM's argument parser does.

vLLM's ``FlexibleArgumentParser.parse_args`` (vllm/utils/__init__.py) turns ``--gpu_memory_utilization`` into
``--gpu-memory-utilization`` and pulls a ``--config FILE.yaml``'s keys in right after ``serve`` (and its
positional model), so the command line wins over the file. argparse's prefix matching stays on, so an
abbreviation of a knob is reported (``abbreviated``) rather than guessed. Finding the command behind
launchers, shells and containers is ``core.unitfile.command`` (``find_in_exec(value, "vllm")``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Flags that take one value (vllm/engine/arg_utils.py, EngineArgs.add_cli_args; the serve/api_server options in
# vllm/entrypoints/openai/cli_args.py). The knobs remediate reads are first.
VALUE_FLAGS: frozenset[str] = frozenset(
    """
    gpu-memory-utilization max-num-batched-tokens max-model-len max-num-seqs kv-cache-memory-bytes
    num-gpu-blocks-override cpu-offload-gb block-size swap-space
    model config host port tokenizer dtype kv-cache-dtype quantization tensor-parallel-size
    pipeline-parallel-size data-parallel-size revision seed max-seq-len-to-capture download-dir
    load-format api-key uvicorn-log-level root-path chat-template tool-call-parser reasoning-parser
    """.split()
)
# Flags that take no value: argparse.BooleanOptionalAction (``--no-X`` too) or store_true.
BOOL_FLAGS: frozenset[str] = frozenset(
    """
    enable-chunked-prefill enforce-eager trust-remote-code enable-prefix-caching disable-log-requests
    disable-log-stats enable-auto-tool-choice disable-frontend-multiprocessing enable-expert-parallel
    """.split()
)
# nargs='+': every word up to the next option.
LIST_FLAGS: frozenset[str] = frozenset({"served-model-name", "allowed-origins", "middleware"})
# The knobs whose abbreviation must not be guessed at.
KNOBS: tuple[str, ...] = (
    "gpu-memory-utilization",
    "max-num-batched-tokens",
    "max-model-len",
    "max-num-seqs",
    "kv-cache-memory-bytes",
    "num-gpu-blocks-override",
    "cpu-offload-gb",
    "enable-chunked-prefill",
    "config",
)
SHORT_VALUE_FLAGS = frozenset({"-tp", "-pp", "-dp", "-q", "-O"})


@dataclass(frozen=True)
class FlagValue:
    """One flag as vLLM will see it: ``value`` None for a bare boolean; ``source`` the command line or the
    ``--config`` file."""

    name: str
    value: str | None
    index: int  # the flag's word in the argv (-1: from the config file)
    source: str = "the command line"


@dataclass(frozen=True)
class VllmArgs:
    """What a vLLM argv sets: the model, each flag's winning occurrence, the ``--config`` file."""

    model: str | None
    flags: Mapping[str, FlagValue] = field(default_factory=dict)
    config_file: str | None = None
    config_read: bool = False  # the file's keys were given to the reader
    abbreviated: tuple[str, ...] = ()  # words that abbreviate a knob ("--gpu-mem")
    model_option_under_serve: bool = False  # `vllm serve --model X`: refused by vLLM 0.11

    def value(self, name: str) -> str | None:
        """The winning value of flag ``name`` (without dashes), or None when unset or a bare boolean."""
        found = self.flags.get(name)
        return found.value if found else None

    def is_set(self, name: str) -> bool:
        return name in self.flags

    def is_enabled(self, name: str) -> bool | None:
        """A boolean flag: True (``--X``), False (``--no-X``), None (unset)."""
        found = self.flags.get(name)
        if found is None:
            return None
        return found.value is None or found.value.lower() not in ("false", "0", "no")

    def owner(self, name: str) -> str:
        """Who decides flag ``name``: the command line, the config file, or — when a config file is named but
        was not read — that file may (never guessed as the default)."""
        found = self.flags.get(name)
        if found is not None:
            return found.source
        if self.config_file is not None and not self.config_read:
            return f"--config {self.config_file} (not read)"
        return "the default"


def canonical(option: str) -> str:
    """``--gpu_memory_utilization`` → ``gpu-memory-utilization`` (FlexibleArgumentParser's underscore rule)."""
    return option.lstrip("-").replace("_", "-")


def _abbreviates(name: str) -> bool:
    bare = name[3:] if name.startswith("no-") else name
    known = VALUE_FLAGS | BOOL_FLAGS | LIST_FLAGS
    return bool(bare) and bare not in known and any(knob.startswith(bare) for knob in KNOBS)


def parse_vllm_args(words: Sequence[str], *, serve: bool, config: Mapping[str, object] | None = None) -> VllmArgs:
    """Read ``words`` (the argv after ``vllm serve`` or after ``-m vllm.entrypoints.openai.api_server``).

    ``config``: the ``--config`` file's keys when the caller read it (a YAML mapping); its values give way to
    the command line's, as in ``_pull_args_from_config``.
    """
    flags: dict[str, FlagValue] = {}
    model: str | None = None
    abbreviated: list[str] = []
    model_option = False
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            if model is None and serve:
                model = word
            index += 1
            continue
        if word in SHORT_VALUE_FLAGS:
            index += 2
            continue
        option, eq, inline = word.partition("=")
        name = canonical(option)
        if _abbreviates(name):
            abbreviated.append(word)
        if name in BOOL_FLAGS or (name.startswith("no-") and name[3:] in BOOL_FLAGS):
            key, value = (name[3:], "false") if name.startswith("no-") else (name, inline if eq else None)
            flags[key] = FlagValue(key, value, index)
            index += 1
            continue
        if eq:
            flags[name] = FlagValue(name, inline, index)
            index += 1
            continue
        if name in LIST_FLAGS:
            end = index + 1
            while end < len(words) and not words[end].startswith("-"):
                end += 1
            flags[name] = FlagValue(name, " ".join(words[index + 1 : end]), index)
            index = end
            continue
        has_value = index + 1 < len(words) and (name in VALUE_FLAGS or not words[index + 1].startswith("-"))
        flags[name] = FlagValue(name, words[index + 1] if has_value else None, index)
        index += 2 if has_value else 1
    if serve and "model" in flags:
        model_option = True
    if model is None and "model" in flags:
        model = flags["model"].value
    config_file = flags["config"].value if "config" in flags else None
    if config is not None and config_file is not None:
        source = f"--config {config_file}"
        for key, raw in config.items():
            name = canonical(str(key))
            if name not in flags:
                text = None if raw is True else str(raw).lower() if isinstance(raw, bool) else str(raw)
                flags[name] = FlagValue(name, text, -1, source)
        if model is None and isinstance(config.get("model"), str):
            model = str(config["model"])
    return VllmArgs(model, flags, config_file, config is not None and config_file is not None,
                    tuple(abbreviated), model_option)  # fmt: skip
