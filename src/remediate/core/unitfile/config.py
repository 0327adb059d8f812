"""PURE: a server's ``--config FILE.yaml``, turned into the argv words its engine makes of it.

Both engines merge the file's keys into the argv *before* the command line's own words, so the command line
wins (CLI > config > defaults):

- sglang: ``prepare_server_args`` (srt/server_args.py) hands the argv to ``ConfigArgumentMerger
  .merge_config_with_args`` (0.5.23: srt/utils/server_args_config_parser.py; 0.5.5: srt/
  server_args_config_parser.py): ``config_args + before_config + after_config``. ``_convert_config_to_args``
  writes each key as ``--{key}`` *verbatim*: a key spelled with underscores (``mem_fraction_static``) becomes
  ``--mem_fraction_static``, which sglang's argparse does not know (it exits 2). A ``True`` store_true key is
  the bare flag, a ``False`` one is left out; a list is ``--key a b``; a mapping is its JSON.
- vLLM: ``FlexibleArgumentParser._pull_args_from_config`` (vllm/utils/argparse_utils.py; 0.11 and 0.8.5:
  vllm/utils/__init__.py) puts ``load_config_file``'s words after ``serve`` and its model, before the rest;
  ``parse_args`` then turns underscores into dashes, so both spellings work. ``False`` is ``--no-{key}`` where
  that flag exists, else nothing.

Either engine reads the file only for the exact word ``--config`` followed by its path (``"--config" in args``):
``--config=FILE`` is an ordinary option whose file is never read. The file must end in ``.yaml``/``.yml``.
The file is read on the host by the probe (the same bounded, no-follow read as environment files) and parsed
there (host/probe.py ``load_config``: ``yaml.safe_load`` without aliases, bounded); here its mapping becomes
words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from remediate.core.engines.base import Engine
from remediate.errors import ConfigError


@dataclass(frozen=True)
class ConfigWord:
    """One word the engine makes of the file: ``key`` is the YAML key it came from."""

    text: str
    key: str


@dataclass(frozen=True)
class ServerConfig:
    """A ``--config`` file named by the command line: ``words`` as the engine merges them (None: not read here,
    ``unread`` says why)."""

    path: str
    words: tuple[ConfigWord, ...] | None
    unread: str = ""
    notes: tuple[str, ...] = ()

    def value_of(self, key: str) -> str | None:
        """The YAML value behind a word of key ``key`` as the engine passes it (``0.88``)."""
        return None if self.words is None else next((w.text for w in self.words if w.key == key and
                                                     not w.text.startswith("--")), None)  # fmt: skip


def named_config(words: Sequence[str]) -> tuple[int, str] | None:
    """(index, path) of ``--config PATH`` in the server's argv, as both engines find it (the exact word);
    ConfigError for two of them or a trailing one (sglang's "Multiple config files specified! Only one
    allowed." / "No config file specified after --config flag!", vLLM's assertion)."""
    found = [index for index, word in enumerate(words) if word == "--config"]
    if len(found) > 1:
        raise ConfigError("the command line names --config twice; the engine allows one config file")
    if not found:
        return None
    if found[0] == len(words) - 1:
        raise ConfigError("the command line ends with --config and no file")
    return found[0], words[found[0] + 1]


@dataclass(frozen=True)
class ConfigRead:
    """A ``--config`` file as the host read and parsed it (host/probe.py ``load_config``): its top-level
    mapping, or the one line saying why it cannot be used (not YAML, too big, aliases, no mapping)."""

    data: Mapping[object, object] | None = None
    error: str | None = None


def _scalar(value: object) -> str:
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def config_words(data: Mapping[object, object], engine: Engine) -> tuple[tuple[ConfigWord, ...], tuple[str, ...]]:
    """The words ``engine`` makes of the file's mapping (its ``config_*`` rules: sglang's keys verbatim and
    ``--flag true``, vLLM's underscores dashed and ``--no-flag``), and notes on keys it will refuse."""
    known, bool_flags = engine.resolve_flag, engine.bool_flags
    words: list[ConfigWord] = []
    notes: list[str] = []
    for raw_key, value in data.items():
        key = str(raw_key)
        dashed = key.replace("_", "-")
        if not engine.config_dashes_keys and "_" in key and known(key) is None and known(dashed) is not None:
            notes.append(
                f"key {key} becomes --{key}, which {engine.label} does not accept (it exits 2): write {dashed}"
            )
        name = dashed if engine.config_dashes_keys else key
        flag = f"--{name}"
        if isinstance(value, bool):
            if dashed in bool_flags or known(name) in bool_flags:
                if value:
                    words.append(ConfigWord(flag, key))
                elif engine.config_negates_false:
                    words.append(ConfigWord(f"--no-{name}", key))
            elif engine.config_bool_values:
                words += [ConfigWord(flag, key), ConfigWord(str(value).lower(), key)]
            elif value:
                words.append(ConfigWord(flag, key))
        elif isinstance(value, list):
            if value:
                words += [ConfigWord(flag, key), *(ConfigWord(_scalar(item), key) for item in value)]
        else:
            words += [ConfigWord(flag, key), ConfigWord(_scalar(value), key)]
    return tuple(words), tuple(notes)
