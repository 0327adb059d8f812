"""PURE: which version of its engine a host runs, read from the best source there is.

Three sources, best first (:func:`first_known`):

* ``server``: the running server's own report. sglang's server-info document carries ``"version":
  __version__`` in every release read (0.4.6.post5 … 0.5.23 srt/entrypoints/http_server.py ``get_server_info``
  / ``server_info``); vLLM answers ``GET /version`` with ``{"version": VLLM_VERSION}`` (0.8.5 … 0.11.0
  entrypoints/openai/api_server.py ``show_version``; 0.34.0 entrypoints/serve/instrumentator/basic.py).
* ``log``: vLLM's startup line in the unit's journal (the newest start's): ``vLLM API server version %s``
  (0.8.5 … 0.11.0 entrypoints/openai/api_server.py ``run_server``), ``vLLM server version %s, serving model %s``
  or, under vLLM's own log formatter (a journal's case), its logo's ``version %s`` line (``log_version_and_model``:
  0.15.1 … 0.19.1 entrypoints/utils.py, 0.34.0 entrypoints/common/startup.py). sglang logs
  no version at startup (only its ``sglang version:`` CLI command prints one, cli/main.py).
* ``package``: the ``<name>-<version>.dist-info`` directory of the engine's distribution in the site-packages of
  the unit's interpreter (importlib.metadata's own source of ``version()``): what the next start would run.

A server's answer is not trusted: a version is kept only if it looks like one (PEP 440's public and local
parts, bounded in length).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from remediate.models import EngineVersion

SOURCES = ("server", "log", "package")
__all__ = [
    "SOURCES",
    "EngineVersion",
    "first_known",
    "parse_dist_version",
    "parse_log_version",
    "parse_server_version",
]

_VERSION = re.compile(r"\d+(?:\.\d+){0,4}(?:[.-]?(?:a|b|rc|post|dev)\d*)*(?:\+[A-Za-z0-9.]+)?")
_MAX_LEN = 64
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# vLLM's startup lines, newest spelling last (module docstring); the version is group 1.
_VLLM_LINES = (
    re.compile(r"vLLM API server version (\S+)"),
    re.compile(r"vLLM server version (\S+?),? serving model"),
    re.compile(r"█\s+version\s+(\S+)\s*$"),
)
# ``sglang-0.5.23.dist-info``, ``vllm-0.11.0+cu128.dist-info``; an old ``setup.py develop``'s
# ``sglang-0.4.6.post5-py3.10.egg-info`` too.
_DIST = re.compile(r"(?:^|/)([A-Za-z0-9_.]+)-([^/-]+)(?:-py\d+(?:\.\d+)?)?\.(?:dist|egg)-info/?$")


def clean_version(value: object) -> str | None:
    """``value`` if it is a version string (bounded, PEP 440-like), else None."""
    if not isinstance(value, str) or len(value) > _MAX_LEN:
        return None
    text = value.strip().lstrip("v")
    return text if _VERSION.fullmatch(text) else None


def parse_server_version(engine: str, document: Mapping[str, Any] | None) -> EngineVersion | None:
    """The ``version`` key of the server's own document (sglang's server info, vLLM's ``/version``)."""
    version = clean_version(document.get("version")) if document is not None else None
    return EngineVersion(engine, version, "server") if version else None


def parse_log_version(engine: str, lines: Iterable[str]) -> EngineVersion | None:
    """The newest start's version line in the journal (vLLM only: sglang logs none)."""
    if engine != "vllm":
        return None
    found: str | None = None
    for line in lines:
        if "version" not in line:
            continue
        text = _ANSI.sub("", line)
        for pattern in _VLLM_LINES:
            match = pattern.search(text)
            if match is not None and (version := clean_version(match.group(1))):
                found = version
                break
    return EngineVersion(engine, found, "log") if found else None


def parse_dist_version(engine: str, paths: Iterable[str]) -> EngineVersion | None:
    """The engine's distribution among ``*.dist-info`` directory names, the first in the interpreter's search
    order (as importlib.metadata finds it: the first path entry holding the name wins)."""
    for path in paths:
        match = _DIST.search(path.strip())
        if match is None:
            continue
        name = match.group(1).replace("_", "-").replace(".", "-").lower()
        version = clean_version(match.group(2))
        if name == engine and version:
            return EngineVersion(engine, version, "package")
    return None


def first_known(*versions: EngineVersion | None) -> EngineVersion | None:
    """The first version read (sources best first)."""
    return next((v for v in versions if v is not None), None)
