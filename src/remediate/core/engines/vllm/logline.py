"""PURE: a vLLM log line without its prefixes: journalctl's, the engine process's, vLLM's logger's.

vllm/logger.py ``_FORMAT``: ``"%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"`` with
``_DATE_FORMAT = "%m-%d %H:%M:%S"`` (0.8.5: ``%(filename)s``); in 0.11 the engine core's output lines start with
``(EngineCore_DP0 pid=1234) `` (vllm/utils/__init__.py ``_add_prefix``, cyan when colour is on).
"""

from __future__ import annotations

import re

from remediate.core.logline import split_line

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PROCESS = re.compile(r"^\((?P<process>[\w.-]+) pid=\d+\) ")
_LOGGER = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[(?P<where>[^\]\s]+:\d+)\] "
)


def vllm_message(raw: str) -> tuple[str, str]:
    """(the message, the logger's level or "") of one raw line; never raises."""
    text = _ANSI.sub("", split_line(0, raw).text)
    process = _PROCESS.match(text)
    if process is not None:
        text = text[process.end() :]
    logger = _LOGGER.match(text)
    if logger is None:
        return text, ""
    return text[logger.end() :], logger.group("level")
