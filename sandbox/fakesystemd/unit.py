"""Unit files as systemd reads them: fragment + sorted drop-ins, continuations, list settings, quoting.

An independent oracle: stdlib only, never imports `remediate`.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket

UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system")
# Settings that accumulate; an empty assignment resets the list (systemd.unit(5), systemd.exec(5)).
LIST_SETTINGS = {
    "ExecStartPre",
    "ExecStart",
    "ExecStartPost",
    "ExecStop",
    "ExecStopPost",
    "ExecReload",
    "ExecCondition",
    "Environment",
    "EnvironmentFile",
    "PassEnvironment",
    "UnsetEnvironment",
    "SupplementaryGroups",
    "After",
    "Before",
    "Wants",
    "Requires",
    "WantedBy",
    "RequiredBy",
    "Alias",
    "Also",
    "Documentation",
    "ConditionPathExists",
    "AssertPathExists",
    "ReadWritePaths",
    "SuccessExitStatus",
    "RestartPreventExitStatus",
}
EXEC_PREFIXES = "-@:+!"
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def normalize(name: str) -> str:
    return name if "." in name else name + ".service"


def read_logical_lines(text: str) -> list[str]:
    """Join backslash continuations (backslash -> space); comment lines inside a continuation are skipped."""
    out: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if pending is not None and line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending = (pending or "") + line[:-1] + " "
            continue
        if pending is not None:
            line = pending + line
            pending = None
        out.append(line)
    if pending is not None:
        out.append(pending)
    return out


def parse_sections(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) in file order; comments and assignments outside sections dropped."""
    section = ""
    items: list[tuple[str, str, str]] = []
    for line in read_logical_lines(text):
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if "=" not in line or not section:
            continue
        key, _, value = line.partition("=")
        items.append((section, key.strip(), value.strip()))
    return items


def merge(items: list[tuple[str, str, str]]) -> dict[str, dict[str, list[str]]]:
    """Apply assignments in order: list settings accumulate (empty resets), others: last wins."""
    merged: dict[str, dict[str, list[str]]] = {}
    for section, key, value in items:
        sec = merged.setdefault(section, {})
        if key in LIST_SETTINGS:
            if value == "":
                sec[key] = []
            else:
                sec.setdefault(key, []).append(value)
        else:
            sec[key] = [value] if value != "" else []
    return merged


def source_files(name: str) -> tuple[str | None, list[str]]:
    """Fragment path and drop-in paths (sorted by file name; /etc wins over /run for the same name)."""
    fragment = None
    for d in UNIT_DIRS:
        path = os.path.join(d, name)
        if os.path.isfile(path):
            fragment = path
            break
    dropins: dict[str, str] = {}
    stem_dirs = [name + ".d"]
    if "-" in name.split(".")[0]:
        stem_dirs.insert(0, name.split("-")[0] + "-." + name.rsplit(".", 1)[1] + ".d")
    stem_dirs.insert(0, name.rsplit(".", 1)[1] + ".d")  # service.d/ applies to all services
    for d in reversed(UNIT_DIRS):
        for sd in stem_dirs:
            base = os.path.join(d, sd)
            try:
                entries = os.listdir(base)
            except OSError:
                continue
            for entry in entries:
                if entry.endswith(".conf"):
                    dropins[entry] = os.path.join(base, entry)
    return fragment, [dropins[k] for k in sorted(dropins)]


def fingerprint(paths: list[str]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.encode() + b"\0")
        try:
            with open(path, "rb") as f:
                digest.update(f.read())
        except OSError:
            digest.update(b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def disk_fingerprint(name: str) -> str:
    fragment, dropins = source_files(name)
    return fingerprint(([fragment] if fragment else []) + dropins)


def specifiers(value: str, name: str) -> str:
    """Expand the common specifiers (%% %n %N %p %i %H %t %S %L %E %h)."""
    prefix = name.rsplit(".", 1)[0]
    table = {
        "%": "%",
        "n": name,
        "N": prefix,
        "p": prefix.split("@")[0],
        "i": prefix.split("@", 1)[1] if "@" in prefix else "",
        "H": socket.gethostname(),
        "t": "/run",
        "S": "/var/lib",
        "L": "/var/log",
        "E": "/etc",
        "h": "/root",
        "C": "/var/cache",
    }
    return re.sub(r"%(.)", lambda m: table.get(m.group(1), m.group(0)), value)


_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}


def _unescape_at(text: str, i: int) -> tuple[str, int]:
    """C escape starting at text[i] == '\\'; returns (chars, next index)."""
    if i + 1 >= len(text):
        return "\\", i + 1
    c = text[i + 1]
    if c in _ESCAPES:
        return _ESCAPES[c], i + 2
    if c == "x" and re.match(r"[0-9a-fA-F]{2}", text[i + 2 : i + 4]):
        return chr(int(text[i + 2 : i + 4], 16)), i + 4
    if c in "01234567" and re.match(r"[0-7]{3}", text[i + 1 : i + 4]):
        return chr(int(text[i + 1 : i + 4], 8)), i + 4
    if c == "u" and re.match(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
        return chr(int(text[i + 2 : i + 6], 16)), i + 6
    if c == ";":
        return ";", i + 2
    return c, i + 2  # unknown escape: keep the character (systemd's relaxed mode)


def split_words(text: str) -> list[str]:
    """extract_first_word() with UNQUOTE|CUNESCAPE: quotes group, C escapes apply, whitespace splits."""
    words: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\n":
            i += 1
        if i >= n:
            return words
        word, quote, started = [], "", False
        while i < n:
            c = text[i]
            if quote:
                if c == quote:
                    quote = ""
                    i += 1
                elif c == "\\":
                    chars, i = _unescape_at(text, i)
                    word.append(chars)
                else:
                    word.append(c)
                    i += 1
            elif c in " \t\n":
                break
            elif c in "'\"":
                quote, started = c, True
                i += 1
            elif c == "\\":
                chars, i = _unescape_at(text, i)
                word.append(chars)
            else:
                word.append(c)
                i += 1
        if word or started:
            words.append("".join(word))


def parse_exec(value: str, name: str) -> dict[str, object]:
    """One ExecStart= value -> {path, argv, flags(list of prefix chars), raw}."""
    value = specifiers(value, name)
    m = re.match(r"^([-@:+!]*)", value)
    prefixes = m.group(1) if m else ""
    rest = value[len(prefixes) :]
    words = split_words(rest)
    # A bare ";" separates commands (oneshot); we keep only the first command and remember the rest.
    if ";" in words:
        words = words[: words.index(";")]
    if not words:
        return {"path": "", "argv": [], "flags": list(prefixes), "raw": value}
    path = words[0]
    argv = words[1:] if "@" in prefixes else words
    return {"path": path, "argv": argv, "flags": list(prefixes), "raw": value}


def parse_environment(values: list[str], name: str) -> list[str]:
    """Environment= values -> ["K=V", …]; later assignments of a variable win (kept at its first slot)."""
    env: dict[str, str] = {}
    for value in values:
        for word in split_words(specifiers(value, name)):
            key, eq, val = word.partition("=")
            if eq and NAME_RE.match(key):
                env.pop(key, None)
                env[key] = val
    return [f"{k}={v}" for k, v in env.items()]


def parse_env_file(text: str) -> dict[str, str]:
    """EnvironmentFile= syntax: KEY=VALUE lines, shell-like quotes and escapes, # and ; comments."""
    env: dict[str, str] = {}
    lines = text.replace("\\\n", "").splitlines()
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, eq, raw = line.partition("=")
        key = key.strip()
        if not eq or not NAME_RE.match(key):
            continue
        raw = raw.lstrip()
        out, i, quote = [], 0, ""
        while i < len(raw):
            c = raw[i]
            if quote == "'":
                if c == "'":
                    quote = ""
                else:
                    out.append(c)
            elif quote == '"':
                if c == '"':
                    quote = ""
                elif c == "\\" and i + 1 < len(raw) and raw[i + 1] in '"\\`$':
                    i += 1
                    out.append(raw[i])
                else:
                    out.append(c)
            elif c in "'\"":
                quote = c
            elif c == "\\" and i + 1 < len(raw):
                i += 1
                out.append(raw[i])
            elif c in "#;" and (not out or raw[i - 1] in " \t"):
                break
            else:
                out.append(c)
            i += 1
        env[key] = "".join(out).rstrip() if not quote else "".join(out)
    return env


def parse_duration(value: str, default: float) -> float:
    """systemd time spans: "90", "90s", "1min 30s", "500ms", "infinity"."""
    value = value.strip()
    if not value:
        return default
    if value == "infinity":
        return float("inf")
    units = {
        "us": 1e-6,
        "usec": 1e-6,
        "ms": 1e-3,
        "msec": 1e-3,
        "s": 1,
        "sec": 1,
        "second": 1,
        "seconds": 1,
        "m": 60,
        "min": 60,
        "minute": 60,
        "minutes": 60,
        "h": 3600,
        "hr": 3600,
        "hour": 3600,
        "hours": 3600,
        "d": 86400,
        "day": 86400,
        "days": 86400,
    }
    total = 0.0
    for num, unit in re.findall(r"([0-9.]+)\s*([a-z]*)", value):
        total += float(num) * units.get(unit or "s", 1)
    return total


def load(name: str) -> dict[str, object]:
    """Build the snapshot daemon-reload keeps: sources, fingerprint and the merged, parsed definition."""
    fragment, dropins = source_files(name)
    if fragment is None:
        return {"name": name, "load_state": "not-found", "fragment": "", "dropins": [], "fingerprint": ""}
    items: list[tuple[str, str, str]] = []
    for path in [fragment, *dropins]:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                items.extend(parse_sections(f.read()))
        except OSError:
            pass
    merged = merge(items)
    unit_sec, svc, install = merged.get("Unit", {}), merged.get("Service", {}), merged.get("Install", {})

    def one(sec: dict[str, list[str]], key: str, default: str = "") -> str:
        vals = sec.get(key)
        return vals[-1] if vals else default

    svc_type = one(svc, "Type", "simple")
    exec_start = [parse_exec(v, name) for v in svc.get("ExecStart", [])]
    load_state, load_error = "loaded", ""
    if not exec_start:
        load_state, load_error = "bad-setting", "Service has no ExecStart=, ExecStop=, or SuccessAction=. Refusing."
    elif len(exec_start) > 1 and svc_type != "oneshot":
        load_state = "bad-setting"
        load_error = (
            "Service has more than one ExecStart= setting, which is only allowed for Type=oneshot services. Refusing."
        )
    env_files = []
    for value in svc.get("EnvironmentFile", []):
        optional = value.startswith("-")
        env_files.append({"path": specifiers(value.lstrip("-"), name), "optional": optional})
    start_limit_interval = one(unit_sec, "StartLimitIntervalSec", one(svc, "StartLimitInterval", ""))
    return {
        "name": name,
        "load_state": load_state,
        "load_error": load_error,
        "fragment": fragment,
        "dropins": dropins,
        "fingerprint": fingerprint([fragment, *dropins]),
        "description": one(unit_sec, "Description", name),
        "type": svc_type,
        "exec_start": exec_start,
        "exec_start_pre": [parse_exec(v, name) for v in svc.get("ExecStartPre", [])],
        "exec_stop": [parse_exec(v, name) for v in svc.get("ExecStop", [])],
        "environment": parse_environment(svc.get("Environment", []), name),
        "environment_files": env_files,
        "restart": one(svc, "Restart", "no"),
        "restart_sec": parse_duration(one(svc, "RestartSec"), 0.1),
        "timeout_stop_sec": parse_duration(one(svc, "TimeoutStopSec", one(svc, "TimeoutSec")), 90.0),
        "start_limit_interval": parse_duration(start_limit_interval, 10.0),
        "start_limit_burst": int(one(unit_sec, "StartLimitBurst", one(svc, "StartLimitBurst", "5")) or 5),
        "user": one(svc, "User"),
        "group": one(svc, "Group"),
        "working_directory": specifiers(one(svc, "WorkingDirectory"), name),
        "kill_signal": one(svc, "KillSignal", "SIGTERM"),
        "success_exit_status": " ".join(svc.get("SuccessExitStatus", [])).split(),
        "wanted_by": " ".join(install.get("WantedBy", [])).split(),
        "syslog_identifier": one(svc, "SyslogIdentifier"),
    }
