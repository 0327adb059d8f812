"""PURE: systemd service unit names — validated against systemd's grammar and normalised.

``sglang`` and ``sglang.service`` name the same unit, so they must take the same lock and the same
paths; a name that systemd would refuse (``a/../../x``, an empty instance, a leading dash that a
command would read as an option) is bad input before any host is contacted.
"""

from __future__ import annotations

import re

from remediate.errors import ConfigError

_MAX = 255  # systemd's UNIT_NAME_MAX (256) less the NUL
# systemd's VALID_CHARS for a unit prefix/instance: ASCII letters and digits, ":", "-", "_", ".", "\".
_NAME = re.compile(r"^(?P<prefix>[A-Za-z0-9:_.\\-]+?)(?:@(?P<instance>[A-Za-z0-9:_.\\-]*))?\.service$")
_OTHER_TYPES = (".socket", ".target", ".timer", ".mount", ".path", ".slice", ".scope", ".device", ".swap")


def normalise_unit(name: str) -> str:
    """``sglang`` → ``sglang.service``; ConfigError for anything systemd would not accept as a service."""
    text = name.strip()
    if not text:
        raise ConfigError("--unit is empty")
    if text.endswith(_OTHER_TYPES):
        raise ConfigError(f"--unit {name!r} is not a service unit")
    full = text if text.endswith(".service") else f"{text}.service"
    match = _NAME.fullmatch(full)
    if match is None or len(full) > _MAX or full.startswith(("-", ".")):
        raise ConfigError(
            f"--unit {name!r} is not a valid systemd unit name "
            "(letters, digits and ':-_.\\' with an optional @instance, at most 255 characters)"
        )
    if match.group("instance") == "":
        raise ConfigError(f"--unit {name!r} is a template: name an instance (e.g. {match.group('prefix')}@0.service)")
    return full
