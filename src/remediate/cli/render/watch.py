"""What `watch` prints for a person: one line per event of the watcher (the terminal, the journal under
systemd) and `watch status` (every watched host, readable at 80 columns). Plain text: the journal and a
pipe get the same words as a terminal."""

from __future__ import annotations

import time
from typing import Any

from remediate.core.unitfile.secrets import mask_secrets

WIDTH = 80
_SHORT = {"mem_fraction_static": "fraction", "gpu_memory_utilization": "fraction",
          "chunked_prefill_size": "chunk", "max_num_batched_tokens": "chunk"}  # fmt: skip
_SHOWN = ("detected", "decided", "acted", "outcome", "breaker", "recovered", "undo", "approval_waiting",
          "unreachable")  # fmt: skip


def clock(at: Any) -> str:
    """``12-05 03:12:04Z`` (UTC), or ``-``."""
    if not isinstance(at, int | float):
        return "-"
    return time.strftime("%m-%d %H:%M:%SZ", time.gmtime(at))


def ago(seconds: Any) -> str:
    """``42s``, ``12m``, ``5h03m``, ``2d04h``."""
    if not isinstance(seconds, int | float):
        return "?"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _clip(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def event_line(event: dict[str, Any]) -> str | None:
    """One line for a person of an audit record (time, host, unit, what, why in a few words; the journal
    under systemd stamps it again, a terminal has only this one); None for the
    records a person need not read as they happen (diagnosed, folded…): the audit log has them all."""
    kind = event.get("event")
    if kind not in _SHOWN:
        return None
    where = " ".join(str(x) for x in (event.get("host"), event.get("unit")) if x)
    head = f"{clock(event.get('at'))} {where}".rstrip()
    if kind == "detected":
        what = f"crashed: {event.get('reason')}"
    elif kind == "decided":
        what = f"decided {event.get('verdict')}: {event.get('reason')}" + (" (dry run)" if event.get("dry_run") else "")
    elif kind == "acted":
        by = event.get("approved_by")
        what = f"fixing (incident {event.get('incident')}" + (f", approved by {by})" if by else ")")
    elif kind == "outcome":
        what = f"fix {event.get('outcome')}" + _change(event)
        if event.get("error") and event.get("outcome") not in ("remediated", "unchanged"):
            what += f": {event.get('error')}"
    elif kind == "breaker":
        what = str(event.get("reason"))
    elif kind == "recovered":
        what = f"a dead watcher's fix ({event.get('incident')}): {event.get('step')}"
    elif kind == "undo":
        what = f"re-check {event.get('recheck')}: restoring {event.get('backup')}"
    elif kind == "approval_waiting":
        what = f"approved fix waits: {event.get('reason')}"
    else:
        what = f"unreachable, retry in {ago(event.get('retry_in'))}"
    return mask_secrets(f"{head} {what}")  # never cut: the journal keeps the whole why; secrets masked as the audit


def _change(event: dict[str, Any]) -> str:
    """``: chunked_prefill_size -→4096, alloc -→expandable_segments:True``: what the fix changed."""
    parts = []
    for key in ("flags", "env"):
        pair = event.get(key)
        before = pair.get("before") if isinstance(pair, dict) else None
        after = pair.get("after") if isinstance(pair, dict) else None
        before = before if isinstance(before, dict) else {}
        for name, value in (after if isinstance(after, dict) else {}).items():
            if before.get(name) != value:
                shown = "alloc" if key == "env" else _SHORT.get(name, name)
                parts.append(f"{shown} {before.get(name) or '-'}→{value or '-'}")
    return (": " + ", ".join(parts)) if parts else ""


def status_lines(doc: dict[str, Any]) -> list[str]:
    """`watch status` for a person: the switches, then each watched host in a few lines (80 columns)."""
    now = doc.get("now")
    unknown = doc["paused"] is None  # the database could not be read: neither switch is known
    breaker = "unknown" if unknown else doc["breaker"] or "closed"
    paused = "unknown" if unknown else "yes" if doc["paused"] else "no"
    lines = [_clip(f"breaker: {breaker}; paused: {paused}; as of {clock(now)}")]
    watched = doc.get("watched") or []
    shown = {w["host"] for w in watched}
    for w in watched:  # a backup's path is never cut: it is copied into `rollback --to`
        lines.extend(line if line.lstrip().startswith("undo: ") else _clip(line)
                     for line in _host_lines(w, now))  # fmt: skip
    for host, state in doc["hosts"].items():  # the audit's hosts watch.db does not have (it could not be read)
        if host not in shown:
            lines.append(f"{host}: {state}")
    for host, why in doc.get("no_unit", {}).items():
        lines.append(_clip(f"{host}: nothing watched: {why}"))
    return lines


def _host_lines(w: dict[str, Any], now: Any) -> list[str]:
    units = ", ".join(w.get("units") or []) or "-"
    lines = [f"{w['host']}: {w['state']}  ({units})"]
    crash = w.get("last_crash")
    if crash:
        kinds = ", ".join(crash.get("kinds") or []) or "kind unknown"
        lines.append(f"  crash  {clock(crash.get('at'))} ({_ago(now, crash.get('at'))} ago) {kinds}")
    fix = w.get("last_fix")
    if fix:
        took = f" in {ago(fix['took_s'])}" if fix.get("took_s") is not None else ""
        lines.append(f"  fix    {clock(fix.get('at'))} ({_ago(now, fix.get('at'))} ago) {fix.get('outcome')}{took}")
        sizes = [_pair("fraction", fix.get("fraction")), _pair("chunk", fix.get("chunk")), _tokens(fix.get("tokens"))]
        for said in ([c for c in sizes if c], [c for c in [_pair("alloc", fix.get("alloc_conf"))] if c]):
            if said:
                lines.append("         " + "; ".join(said))
        if fix.get("backup"):  # its own line, never cut: copied as it is
            lines.append(f"         undo: remediate rollback {w['host']} --to {fix['backup']}")
    nxt = w.get("next_fix") or {}
    if nxt.get("why") == "needs_human":
        lines.append("  next   no automatic fix: needs_human (left to a person)")
    elif nxt.get("at") is not None:
        lines.append(f"  next   fix allowed {clock(nxt['at'])} (in {_ago(nxt['at'], now)}; {nxt.get('detail')})")
    elif w.get("fixes"):
        lines.append(f"  next   fix allowed now ({nxt.get('detail')})")
    for i in w.get("incidents") or []:
        lines.append(f"  open   incident {i['id']} {i.get('outcome') or 'open'}, {i.get('crashes')} crash(es),"
                     f" {ago(i.get('age_s'))} old")  # fmt: skip
    for a in w.get("approvals") or []:
        lines.append(f"  ask    {ago(a.get('age_s'))} old: remediate watch approve {a['id']}")
    return lines


def _ago(later: Any, earlier: Any) -> str:
    if isinstance(later, int | float) and isinstance(earlier, int | float):
        return ago(later - earlier)
    return "?"


def _pair(name: str, value: Any) -> str:
    if not isinstance(value, dict):
        return ""
    before, after = value.get("before"), value.get("after")
    return f"{name} {before if before is not None else '-'}→{after if after is not None else '-'}"


def _tokens(value: Any) -> str:
    if not isinstance(value, dict) or (value.get("before") is None and value.get("after") is None):
        return ""
    b, a = value.get("before"), value.get("after")
    return f"tokens {f'{b:,}' if isinstance(b, int) else '?'}→{f'{a:,}' if isinstance(a, int) else '?'}"
