"""A `journalctl` over the sandbox journal file: -u, -n, -o, --since/--until, -b, -q, -f, --no-pager."""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime, timedelta

from fakesystemd import state as st
from fakesystemd.unit import normalize


def entries(units: list[str], since: float | None = None, until: float | None = None) -> list[dict]:
    try:
        with open(st.JOURNAL, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if units and entry.get("u") not in units:
            continue
        if since is not None and entry["t"] < since:
            continue
        if until is not None and entry["t"] > until:
            continue
        out.append(entry)
    return out


def render(items: list[dict], fmt: str) -> list[str]:
    out = []
    for e in items:
        if fmt == "cat":
            out.append(e["m"])
        elif fmt == "json":
            out.append(
                json.dumps(
                    {
                        "__REALTIME_TIMESTAMP": str(int(e["t"] * 1e6)),
                        "_SYSTEMD_UNIT": e["u"],
                        "SYSLOG_IDENTIFIER": e["id"],
                        "_PID": str(e["pid"]),
                        "MESSAGE": e["m"],
                        "_BOOT_ID": e.get("b", ""),
                        "INVOCATION_ID": e.get("inv", ""),
                        "PRIORITY": str(e.get("p", 6)),
                        "_HOSTNAME": e.get("h", ""),
                    }
                )
            )
        else:
            if fmt == "short-iso":
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(e["t"]))
            elif fmt == "short-precise":
                stamp = time.strftime("%b %d %H:%M:%S", time.localtime(e["t"])) + f".{int(e['t'] % 1 * 1e6):06d}"
            elif fmt == "short-unix":
                stamp = f"{e['t']:.6f}"
            else:
                stamp = time.strftime("%b %d %H:%M:%S", time.localtime(e["t"]))
            out.append(f"{stamp} {e.get('h', '')} {e['id']}[{e['pid']}]: {e['m']}")
    return out


def parse_time(value: str) -> float:
    """journalctl time specs: @EPOCH, 'YYYY-MM-DD[ HH:MM[:SS]]', today, yesterday, now, -5min, '5 min ago'."""
    value = value.strip()
    now = datetime.now()
    if value.startswith("@"):
        return float(value[1:])
    if value == "now":
        return now.timestamp()
    if value in ("today", "yesterday", "tomorrow"):
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return (day + timedelta(days={"today": 0, "yesterday": -1, "tomorrow": 1}[value])).timestamp()
    m = re.fullmatch(r"([-+]?)\s*(\d+)\s*([a-z]*)(\s+ago)?", value)
    if m:
        sign = -1 if m.group(1) == "-" or m.group(4) else 1
        unit = m.group(3) or "s"
        mult = {
            "s": 1,
            "sec": 1,
            "m": 60,
            "min": 60,
            "h": 3600,
            "hour": 3600,
            "hours": 3600,
            "d": 86400,
            "day": 86400,
            "days": 86400,
            "minutes": 60,
            "seconds": 1,
        }.get(unit, 1)
        return now.timestamp() + sign * int(m.group(2)) * mult
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%H:%M:%S", "%H:%M"):
        try:
            parsed = datetime.strptime(value, fmt)
        except ValueError:
            continue
        if fmt.startswith("%H"):
            parsed = now.replace(hour=parsed.hour, minute=parsed.minute, second=parsed.second, microsecond=0)
        return parsed.timestamp()
    raise ValueError(f"Failed to parse timestamp: {value}")


VALUE_OPTS = {
    "-u",
    "--unit",
    "-n",
    "--lines",
    "-o",
    "--output",
    "-S",
    "--since",
    "-U",
    "--until",
    "-t",
    "--identifier",
    "-p",
    "--priority",
}


def main(argv: list[str]) -> int:
    units: list[str] = []
    lines: int | None = None
    fmt, since, until, quiet, follow = "short", None, None, False, False
    args = argv[1:]
    i = 0
    try:
        while i < len(args):
            arg = args[i]
            value = None
            if arg.startswith("--") and "=" in arg:
                arg, value = arg.split("=", 1)
            elif arg in VALUE_OPTS:
                i += 1
                value = args[i] if i < len(args) else ""
            elif len(arg) > 2 and arg[:2] in ("-u", "-n", "-o") and arg[1] != "-":
                arg, value = arg[:2], arg[2:]
            i += 1
            if arg in ("-u", "--unit"):
                units.append(normalize(value or ""))
            elif arg in ("-n", "--lines"):
                lines = None if value in ("all", "+0") else int(value or 10)
            elif arg in ("-o", "--output"):
                fmt = value or "short"
            elif arg in ("-S", "--since"):
                since = parse_time(value or "")
            elif arg in ("-U", "--until"):
                until = parse_time(value or "")
            elif arg in ("-q", "--quiet"):
                quiet = True
            elif arg in ("-f", "--follow"):
                follow = True
            elif arg in ("-e", "--pager-end"):
                lines = 1000 if lines is None else lines
            elif arg == "-b" and i < len(args) and re.fullmatch(r"-?\d+", args[i]):
                i += 1  # current boot only: the sandbox journal never spans boots
            # --no-pager, -x, -b, --boot, -l, --no-hostname, -a, --system: accepted
    except ValueError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    if fmt not in ("short", "cat", "short-iso", "short-precise", "short-unix", "json", "with-unit"):
        sys.stderr.write(f"Invalid output mode: {fmt}\n")
        return 1
    found = entries(units, since, until)
    if lines is not None:
        found = found[-lines:] if lines else []
    out = render(found, fmt)
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    elif not quiet and not follow:
        sys.stdout.write("-- No entries --\n")
    sys.stdout.flush()
    if follow:
        seen = len(entries(units, since, until))
        try:
            while True:
                time.sleep(0.1)
                now = entries(units, since, until)
                if len(now) > seen:
                    sys.stdout.write("\n".join(render(now[seen:], fmt)) + "\n")
                    sys.stdout.flush()
                    seen = len(now)
        except (KeyboardInterrupt, BrokenPipeError):
            return 0
    return 0
