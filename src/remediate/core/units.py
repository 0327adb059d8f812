"""PURE: several sglang units on one host — ``--unit`` as a selection, systemd's globs, the host's listing.

``--unit`` names one unit (``sglang`` → ``sglang.service``, as before), a glob (``'sglang@*'``,
``'sglang-*.service'``), or several names and globs joined by commas (no unit name holds a comma: the retry
file's ``unit: a.service,b.service`` re-runs exactly the pairs that failed). A glob matches the way
``systemctl list-units PATTERN`` matches: systemd's ``unit_name_mangle_with_suffix()`` keeps a valid glob as
it is (``sglang@*`` gets no ``.service``: it matches ``sglang@0-3.service``), and the manager compares with
``fnmatch(pattern, id, FNM_NOESCAPE)`` (src/core/dbus-manager.c, ``list_units_filtered``): ``*``, ``?``,
``[...]`` (``!`` or ``^`` negates, ``]`` first is literal, ranges, ``[:class:]``), a backslash is an ordinary
character. Nothing here does I/O.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass

from remediate.core.diagnosis.findings import Diagnosis
from remediate.core.unitfile.unitname import normalise_unit
from remediate.errors import ConfigError

GLOB_CHARS = "*?["  # systemd's GLOB_CHARS (src/basic/glob-util.h)
# systemd's VALID_CHARS_GLOB (src/basic/unit-name.c): a unit name's characters, "@", and "[]!-*?".
_VALID_GLOB = re.compile(r"^[A-Za-z0-9:_.\\@\[\]!*?-]+$")
_SERVICE = re.compile(r"^[A-Za-z0-9:_.\\-]+(?:@[A-Za-z0-9:_.\\-]+)?\.service$")  # an instance, never a template
_CLASSES = {
    "alnum": string.ascii_letters + string.digits,
    "alpha": string.ascii_letters,
    "digit": string.digits,
    "lower": string.ascii_lowercase,
    "upper": string.ascii_uppercase,
    "xdigit": string.hexdigits,
    "punct": string.punctuation,
    "space": " \t\n\r\v\f",
    "blank": " \t",
}


@dataclass(frozen=True)
class UnitSelection:
    """What ``--unit`` (or a host's ``unit`` var) asked for: exact names and globs, in the order given."""

    patterns: tuple[str, ...]

    @property
    def is_single(self) -> bool:
        """One exact name: today's one-unit run, byte for byte."""
        return len(self.patterns) == 1 and not is_unit_glob(self.patterns[0])

    @property
    def has_glob(self) -> bool:
        return any(is_unit_glob(p) for p in self.patterns)

    @property
    def text(self) -> str:
        return ",".join(self.patterns)


def is_unit_glob(text: str) -> bool:
    """systemd's ``string_is_glob()``: any of ``*?[``."""
    return any(c in text for c in GLOB_CHARS)


def normalise_unit_spec(spec: str) -> str:
    """``--unit``'s value checked and normalised (each name as :func:`normalise_unit`, each glob kept as
    systemd keeps it); ConfigError naming the flag for anything else. One plain name stays exactly as before."""
    return parse_unit_spec(spec).text


def parse_unit_spec(spec: str) -> UnitSelection:
    """``a``, ``'sglang@*'``, ``a.service,sglang-*`` → the selection; ConfigError for bad input."""
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) > 1 and not all(parts):
        raise ConfigError(f"--unit {spec!r} has an empty name between its commas")
    out: list[str] = []
    for part in parts:
        if not is_unit_glob(part):
            name = normalise_unit(part)
        elif not _VALID_GLOB.fullmatch(part) or len(part) > 255 or part.startswith("-"):
            raise ConfigError(
                f"--unit {part!r} is not a valid unit glob "
                "(a unit name's characters, '@' and the glob characters '*?[]!', at most 255)"
            )
        else:
            name = part
        if name not in out:
            out.append(name)
    return UnitSelection(tuple(out))


def single_unit(spec: str | None, command: str) -> str | None:
    """For the commands that work on one unit per host (`bench`, `watch`): a glob or several names is bad
    input (ConfigError naming the command), one name as :func:`normalise_unit` gives it."""
    if spec is None:
        return None
    selection = parse_unit_spec(spec)
    if not selection.is_single:
        raise ConfigError(f"--unit {spec!r}: `remediate {command}` works on one unit per host: name it exactly")
    return selection.patterns[0]


def unit_fnmatch(pattern: str, name: str) -> bool:
    """``fnmatch(pattern, name, FNM_NOESCAPE)`` over a unit name (no ``/``, no leading-dot rule), as glibc's
    posix/fnmatch_loop.c reads a bracket: element by element for the character at hand (``!``/``^`` negates,
    ``]`` first is literal, ranges, ``[:class:]``, ``[.c.]``); an unterminated bracket is a literal ``[``, an
    unknown class or a range cut off by the pattern's end matches nothing."""
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key not in memo:
            memo[key] = _match(pattern, name, i, j, match)
        return memo[key]

    return match(0, 0)


def _match(pattern: str, name: str, i: int, j: int, match: Callable[[int, int], bool]) -> bool:
    if i == len(pattern):
        return j == len(name)
    c = pattern[i]
    if c == "*":
        return match(i + 1, j) or (j < len(name) and match(i, j + 1))
    if j == len(name):
        return False
    if c == "?":
        return match(i + 1, j + 1)
    if c == "[":
        verdict, after = _bracket(pattern, i, name[j])
        if verdict == "fail":
            return False
        if verdict != "literal":
            return verdict == "match" and match(after, j + 1)
    return name[j] == c and match(i + 1, j + 1)


def _bracket(pattern: str, start: int, ch: str) -> tuple[str, int]:
    """The bracket at ``start`` against ``ch``: (``match``/``nomatch``/``literal``/``fail``, index after it)."""
    n = len(pattern)
    j = start + 1
    negate = j < n and pattern[j] in "!^"
    j += negate
    first, matched, last_class = True, False, False
    while True:
        if j >= n:
            return ("fail" if last_class and not matched else "literal"), start + 1
        c = pattern[j]
        if c == "]" and not first:
            return ("match" if matched != negate else "nomatch"), j + 1
        first, last_class = False, False
        kind, value, k = _element(pattern, j)
        if matched:  # glibc skips the rest of a bracket that matched, element by element
            j = k if kind != "fail" else j + 1
            continue
        if kind == "fail":
            return "fail", start + 1
        if kind == "class":
            matched, j, last_class = ch in _CLASSES[value], k, True
            continue
        if k < n and pattern[k] == "-" and (k + 1 >= n or pattern[k + 1] != "]"):
            if k + 1 >= n:  # a range cut off by the pattern's end: its first character still matches itself
                if ch != value:
                    return "fail", start + 1
                matched, j = True, k
                continue
            kind2, value2, k2 = _element(pattern, k + 1)
            if kind2 != "char":
                return "fail", start + 1
            matched, j = value <= ch <= value2, k2
            continue
        matched, j = ch == value, k


def _element(pattern: str, j: int) -> tuple[str, str, int]:
    """One element of a bracket at ``j``: (``char``/``class``/``fail``, its value, the index after it).
    ``[:name:]`` is a class (an unknown name fails), ``[.c.]`` and ``[=c=]`` one character (a collating
    symbol never closed fails); a ``[`` that opens none of them is a character."""
    if pattern[j] == "[" and pattern[j + 1 : j + 2] in (":", ".", "="):
        delim = pattern[j + 1]
        close = pattern.find(delim + "]", j + 2)
        if close >= 0:
            name = pattern[j + 2 : close]
            if delim == ":":
                return ("class", name, close + 2) if name in _CLASSES else ("fail", name, close + 2)
            return ("char", name, close + 2) if len(name) == 1 else ("fail", name, close + 2)
        if delim == ".":
            return "fail", "", len(pattern)
    return "char", pattern[j], j + 1


def parse_unit_listing(text: str) -> tuple[str, ...]:
    """The service names in ``systemctl list-units``/``list-unit-files --plain --no-legend`` output (first
    column; a status mark ``●``/``*`` before it skipped), templates and anything not a service left out,
    each once, in the order read."""
    names: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in ("●", "*", "×", "○"):
            words = words[1:]
        if not words or not _SERVICE.fullmatch(words[0]) or len(words[0]) > 255:
            continue
        if words[0] not in names:
            names.append(words[0])
    return tuple(names)


def select_units(selection: UnitSelection, listed: tuple[str, ...]) -> tuple[str, ...]:
    """The listed units the selection names, sorted (an exact name is kept even when not listed: the run
    then says it is not found, as for one ``--unit``)."""
    chosen = {p for p in selection.patterns if not is_unit_glob(p)}
    for pattern in selection.patterns:
        if is_unit_glob(pattern):
            chosen.update(name for name in listed if unit_fnmatch(pattern, name))
    return tuple(sorted(chosen))


@dataclass(frozen=True)
class UnitCrash:
    """One unit's latest run by the crash evidence: crashed (a failure not followed by a good start), or why
    it could not be told (``unreadable``: its probe failed)."""

    unit: str
    crashed: bool
    unreadable: str | None = None

    @property
    def state(self) -> str:
        """For the refusal's JSON: ``crashed``, ``not crashed`` or why it is unknown."""
        return self.unreadable or ("crashed" if self.crashed else "not crashed")


def has_crashed(diagnosis: Diagnosis) -> bool:
    """The unit's latest run crashed: the journal holds a failure and no good start (a run that reached
    ready) after it — the failure `diagnose` reports as current, not stale."""
    return diagnosis.latest_failure_run is not None and not diagnosis.is_stale


def crashed_units(host: str, evidence: tuple[UnitCrash, ...], *, fix: str = "oom") -> tuple[str, ...]:
    """The units `oom` acts on when the host runs several: those whose latest run crashed. ConfigError (one
    line, every unit listed, what to pass) when none crashed or a unit's evidence could not be read."""
    if not evidence:
        raise ConfigError("no sglang unit to choose from", source=host)
    names = ", ".join(e.unit for e in evidence)
    what = "several sglang units" if len(evidence) > 1 else "one sglang unit"
    unreadable = [e for e in evidence if e.unreadable]
    if unreadable:
        why = "; ".join(f"{e.unit}: {e.unreadable}" for e in unreadable)
        raise ConfigError(
            f"{what} ({names}) and the crash evidence of some is unreadable ({why}): "
            f"pass --unit with the one(s) to fix, e.g. `remediate {fix} {host} --unit {unreadable[0].unit}`",
            source=host,
        )
    crashed = tuple(e.unit for e in evidence if e.crashed)
    if not crashed:
        raise ConfigError(
            f"{what} ({names}) and none crashed by the journal's evidence: pass --unit with the "
            f"one(s) to act on, e.g. `remediate {fix} {host} --unit {evidence[0].unit}`",
            source=host,
        )
    return crashed
