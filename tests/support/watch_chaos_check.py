"""The chaos run's checker: what the watcher left (its audit log, watch.db, the controller's transaction log)
and what is on each host (the unit's bytes, its backups, the server) against the invariants of issue 22:

1. every incident ends ``remediated``, ``rolled_back``, ``needs_human`` or reported (``report``, or
   ``breaker_open``: a report with the breaker's reason);
2. the audit log has every step: each crash ``detected`` → ``diagnosed`` → ``decided`` (or ``folded`` into an
   open incident); each incident decided (a reported one may be decided again), its last verdict the
   database's outcome; a fix has one ``acted`` (or a ``recovered`` when its watcher died before acting) and
   one ``outcome`` equal to the database's: no incident acted on twice; a crash a stopped watcher detected
   but did not decide is found again by the next one;
3. each host's unit is its old bytes or the one fixed version, and so is every backup (complete or absent);
   a host is on the fixed bytes exactly when its last fix was ``remediated``, and then the 32k request that
   crashed it is served;
4. the breaker tripped exactly when its threshold was crossed by the crashes' own times (model ``crash_time``,
   the default): each crash once (host and the crashed invocation, as the ``detected`` events say them), at its
   exit's time, which must lie at or before its detection and match an injected crash; the trip must come in
   the round that first knew crashes of more than ``breaker_count`` hosts within one window, never before, and
   no automatic action after it. The older models count a crash at the round that detected it (``process``:
   a window afresh with each watcher; ``state``: one kept across restarts) and are kept for comparison.

``check`` returns the counts and a list of violations (empty: the run passed).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from remediate.controller.watch_audit import read_events
from remediate.controller.watch_state import WatchState
from tests.support.node import UNIT_PATH
from tests.support.watch_chaos import Chaos

FINAL = {"remediated": "remediated", "rolled_back": "rolled_back", "needs_human": "needs_human",
         "report": "reported", "breaker_open": "reported"}  # fmt: skip


def check(chaos: Chaos, breaker_model: str = "crash_time") -> dict[str, Any]:
    """``breaker_model``: which count the trip must match: ``crash_time`` (each crash once, at its own time),
    ``process`` or ``state`` (at the round that detected it, afresh with each watcher or across restarts), or
    ``any``."""
    events = read_events(chaos.state)
    db = WatchState(chaos.state)
    try:
        incidents = db.incidents(limit=10_000)
        breaker_reason = db.breaker_reason()
    finally:
        db.close()
    violations: list[str] = []
    outcomes = _outcomes(incidents, violations)
    stops = tuple(float(x.ended) for x in chaos.lifetimes if x.ended is not None)
    steps = _steps(events, incidents, violations, stops)
    units = _units(chaos, events, violations)
    breaker = _breaker(chaos, events, breaker_reason, violations, breaker_model)
    injected = Counter(f"{i.kind}:{i.result}" for i in chaos.injections)
    restarts = Counter(x.how for x in chaos.lifetimes if x.how)
    return {
        "seed": chaos.config.seed,
        "hosts": len(chaos.nodes),
        "injected": dict(sorted(injected.items())),
        "watcher_stops": dict(restarts),
        "incidents": outcomes,
        "events": dict(Counter(str(e["event"]) for e in events)),
        "steps": steps,
        "units": units,
        "breaker": breaker,
        "violations": violations,
    }


def _outcomes(incidents: list[dict[str, Any]], violations: list[str]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for row in incidents:
        final = FINAL.get(str(row["outcome"]))
        if final is None:
            violations.append(f"incident {row['id']} on {row['host']} ended {row['outcome']!r}")
            final = str(row["outcome"])
        counts[final] += 1
    return dict(sorted(counts.items()))


def _steps(
    events: list[dict[str, Any]], incidents: list[dict[str, Any]], violations: list[str], stops: tuple[float, ...] = ()
) -> dict[str, int]:
    """``stops``: when each watcher was stopped (a crash it detected but did not decide is found again)."""
    by_host: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("host"):
            by_host.setdefault(str(e["host"]), []).append(e)
    undecided = redetected = repeats = 0
    for host, evs in by_host.items():  # each crash: detected → diagnosed → decided | folded
        kinds = [str(e["event"]) for e in evs]
        for i, kind in enumerate(kinds):
            if kind == "detected":
                if kinds[i + 1 : i + 2] == ["diagnosed"] and kinds[i + 2 : i + 3] in (["decided"], ["folded"]):
                    continue
                # A watcher stopped before deciding: the next one must find the same crash again (detected).
                cut = [j for j in range(i + 1, len(kinds)) if kinds[j] in ("detected", "decided", "folded")]
                nxt = cut[0] if cut else None
                died = any(float(evs[i]["at"]) <= t <= (float(evs[nxt]["at"]) if nxt else float("inf")) for t in stops)
                if died and nxt is not None and kinds[nxt] == "detected":
                    redetected += 1
                    continue
                # Or it was the unit's own restart after a crash already decided (NRestarts grew; the exit
                # line was read with that decision): a repeat that would have been folded, nothing lost.
                seen = any(k in ("decided", "folded") for k in kinds[:i])
                if died and seen and str(evs[i].get("reason", "")).startswith("NRestarts"):
                    repeats += 1
                    continue
                undecided += 1
                violations.append(f"{host}: detected at {evs[i]['at']:.3f} then {kinds[i + 1 : i + 3]}")
            # A decision taken again (a `wait` whose slot came free, an approval answered) follows its first one.
            again = evs[i].get("redecided_from") and any(
                e["event"] == "decided" and e.get("incident") == evs[i].get("incident") for e in evs[:i]
            )
            if kind in ("decided", "folded") and not again and kinds[max(0, i - 2) : i] != ["detected", "diagnosed"]:
                violations.append(f"{host}: {kind} at {evs[i]['at']:.3f} without detected → diagnosed before it")
    per: dict[str, Counter[str]] = {}
    last_outcome: dict[str, str] = {}
    last_verdict: dict[str, str] = {}
    for e in events:
        if e.get("incident"):
            per.setdefault(str(e["incident"]), Counter())[str(e["event"])] += 1
            if e["event"] == "outcome":
                last_outcome[str(e["incident"])] = str(e["outcome"])
            if e["event"] == "decided":
                last_verdict[str(e["incident"])] = str(e["verdict"])
    for row in incidents:
        n = per.get(str(row["id"]), Counter())
        if n["decided"] < 1:
            violations.append(f"incident {row['id']}: never decided")
        elif row["outcome"] in FINAL and row["outcome"] not in ("remediated", "rolled_back"):
            if last_verdict.get(str(row["id"])) != row["outcome"]:  # a reported incident may be decided again
                violations.append(f"incident {row['id']}: last decided {last_verdict.get(str(row['id']))!r}"
                                  f" but watch.db says {row['outcome']!r}")  # fmt: skip
        if row["outcome"] in ("remediated", "rolled_back", "failed"):
            if n["acted"] + n["recovered"] < 1 or n["acted"] > 1 or n["outcome"] != 1:
                violations.append(f"incident {row['id']}: acted {n['acted']}, recovered {n['recovered']}, "
                                  f"outcome {n['outcome']} (one fix, one outcome)")  # fmt: skip
            if last_outcome.get(str(row["id"])) != row["outcome"]:
                violations.append(f"incident {row['id']}: audit outcome {last_outcome.get(str(row['id']))!r}"
                                  f" but watch.db says {row['outcome']!r}")  # fmt: skip
        elif n["acted"] or n["outcome"]:
            violations.append(f"incident {row['id']} ({row['outcome']}) has acted/outcome events")
    return {"crashes_detected": sum(1 for e in events if e["event"] == "detected"),
            "folded": sum(1 for e in events if e["event"] == "folded"), "undecided": undecided,
            "redetected_after_a_stop": redetected, "repeat_left_by_a_stop": repeats,
            "recovered": sum(1 for e in events if e["event"] == "recovered")}  # fmt: skip


def _normal(text: bytes, address: str, port: int) -> bytes:
    return text.replace(address.encode(), b"ADDRESS").replace(str(port).encode(), b"PORT")


def _units(chaos: Chaos, events: list[dict[str, Any]], violations: list[str]) -> dict[str, int]:
    fixed_versions: set[bytes] = set()
    counts: Counter[str] = Counter()
    for node in chaos.nodes:
        name, original = node.host.name, chaos.original[node.host.name]
        now = node.bytes(UNIT_PATH)
        fix_outcomes = [str(e["outcome"]) for e in events if e["event"] == "outcome" and e.get("host") == name]
        last_fix = fix_outcomes[-1] if fix_outcomes else None
        versions = {now} | {node.bytes(b) for b in node.backups(UNIT_PATH)}
        for text in versions - {original}:
            if b"--chunked-prefill-size" not in text or not text.rstrip().endswith(b"WantedBy=multi-user.target"):
                violations.append(f"{name}: a unit version that is neither the old bytes nor a whole fix")
            fixed_versions.add(_normal(text, node.host.address, node.port))
        if now == original:
            counts["old_bytes"] += 1
            if last_fix == "remediated":
                violations.append(f"{name}: its last fix was remediated but the unit has the old bytes")
        else:
            counts["new_bytes"] += 1
            if last_fix != "remediated":
                violations.append(f"{name}: the unit has new bytes but its last fix was {last_fix!r}")
        if node.show("ActiveState")["ActiveState"] != "active" or not _healthy(node):
            violations.append(f"{name}: the server is not healthy at the end")
        elif now != original:
            counts["fixed_then_32k_served"] += node.generate(32768, 99).status == 200
        counts["backups"] += len(node.backups(UNIT_PATH))
    if len(fixed_versions) > 1:
        violations.append(f"{len(fixed_versions)} different fixed unit texts across the fleet (one expected)")
    return dict(sorted(counts.items()))


def _healthy(node: Any) -> bool:
    end = time.monotonic() + 20  # a server the watcher just restarted may still be loading
    while not node.healthy():
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


def _crossing(chaos: Chaos, events: list[dict[str, Any]], across_restarts: bool) -> float | None:
    """The round (round_at) of the first decision at which more than breaker_count hosts crashed within the
    window, as the watcher counts them (every detected crash of the round counts, those logged after too)."""
    c = chaos.config
    detected = [e for e in events if e["event"] == "detected"]
    for d in (e for e in events if e["event"] == "decided"):
        start = 0.0 if across_restarts else _lifetime_start(chaos, float(d["at"]))
        now = float(d["round_at"])
        hosts = {e["host"] for e in detected
                 if float(e["at"]) >= start and 0 <= now - float(e["round_at"]) <= c.breaker_window_s}  # fmt: skip
        if len(hosts) > c.breaker_count:
            return now
    return None


def _crash_time_crossing(chaos: Chaos, events: list[dict[str, Any]], violations: list[str]) -> dict[str, Any]:
    """The round that first knew, by the crashes' own times, more than breaker_count hosts crashed within one
    window (``round``), and the crash time at which they did (``at``); each crash counted once."""
    c = chaos.config
    known: dict[tuple[str, str], float] = {}
    out: dict[str, Any] = {"round": None, "at": None, "crashes": 0, "seen_again": 0, "clamped": 0}
    rounds: dict[float, list[dict[str, Any]]] = {}  # the watcher counts a whole round's crashes, then decides
    for e in events:
        if e["event"] == "detected":
            rounds.setdefault(float(e["round_at"]), []).append(e)
    for round_at, detected in rounds.items():
        for e in detected:
            for crash in e.get("crashes") or []:
                key, at = (str(e["host"]), str(crash["key"])), float(crash["at"])
                out["clamped"] += bool(crash.get("clamped"))
                if key in known:
                    out["seen_again"] += 1
                    continue
                known[key] = at
                if at > float(e["at"]) + 0.01:
                    violations.append(
                        f"{e['host']}: crash {crash['key']} at {at:.3f}, after its detection at {e['at']:.3f}"
                    )
            if not e.get("crashes"):
                violations.append(f"{e['host']}: detected at {e['at']:.3f} without its crash time")
        if out["round"] is None:
            for end in sorted(known.values()):
                hosts = {h for (h, _), t in known.items() if end - c.breaker_window_s <= t <= end}
                if len(hosts) > c.breaker_count:
                    out["round"], out["at"] = round_at, end
                    break
    out["crashes"] = len(known)
    out["times"] = sorted([h, at] for (h, _), at in known.items())
    injected = [(i.host, i.at) for i in chaos.injections if i.result in ("crashed", "failed at startup")]
    unmatched = [(h, t) for h, t in injected if not any(k[0] == h and t - 15 <= at <= t + 1 for k, at in known.items())]
    out["injected_matched"] = len(injected) - len(unmatched)
    for h, t in unmatched:
        violations.append(f"{h}: the crash injected at {t:.3f} has no crash time near it")
    # Issue 32: a restart systemd ran (a person's oom/rollback, systemctl restart, stop + start) and the server's
    # words quoting systemd are never a crash: no crash time on that host from its start to its end.
    calm = [(i.host, i.started, i.at, i.kind) for i in chaos.injections if i.kind in ("planned", "quote")
            and i.started is not None and i.result != "skipped"]  # fmt: skip
    out["planned"] = len(calm)
    for (h, key), at in known.items():
        for host, start, end, kind in calm:
            # A crash after the end that an injected crash there explains is that crash (seed 2: a 32k prefill
            # 0.66 s after a stop+start ended), not the planned restart's.
            injected_after = any(x == h and end < t and t - 15 <= at <= t + 1 for x, t in injected)
            if h == host and start <= at <= end + 1 and not (at > end and injected_after):
                violations.append(f"{h}: crash {key} at {at:.3f} during a {kind} injection ({start:.3f}-{end:.3f})")
    return out


def _lifetime_start(chaos: Chaos, at: float) -> float:
    return max((x.started for x in chaos.lifetimes if x.started <= at), default=0.0)


def _breaker(
    chaos: Chaos, events: list[dict[str, Any]], reason: str | None, violations: list[str], model: str = "any"
) -> dict[str, Any]:
    trips = [e for e in events if e["event"] == "breaker"]
    crossings = {model: _crossing(chaos, events, model == "state") for model in ("process", "state")}
    by_time = _crash_time_crossing(chaos, events, violations if model == "crash_time" else [])
    crossings["crash_time"] = by_time["round"]
    injected = _injected_crossing(chaos)
    c = chaos.config
    out = {"trips": len(trips), "crossing": crossings, "injected_crossing_at": injected, "matched": None,
           "threshold": f"more than {c.breaker_count} hosts within {c.breaker_window_s:g}s",
           "by_time": by_time}  # fmt: skip
    if len(trips) > 1:
        violations.append(f"the breaker tripped {len(trips)} times without a resume")
    trip_at = float(trips[0]["round_at"]) if trips else None
    timed = model == "crash_time" or by_time["crashes"] > 0  # "any" weighs crash times only where logged
    matched = [
        m for m, at in crossings.items() if at == trip_at and model in ("any", m) and (timed or m != "crash_time")
    ]
    if not matched:
        violations.append(f"the breaker tripped at {trip_at} but the threshold was crossed at {crossings}")
    out["matched"] = matched[0] if matched else None
    if trips and model in ("any", "crash_time") and by_time["at"] is not None:
        said = trips[0].get("crossed_at")
        if said is None or (abs(float(said) - by_time["at"]) > 1e-3 and not _window_holds(chaos, trips[0], by_time)):
            violations.append(f"the breaker says it was crossed at {said}, the crash times at {by_time['at']}")
    if trip_at is not None:
        out["trip_at"] = trip_at
        if injected is not None:
            out["trip_after_injected_crossing_s"] = round(trip_at - injected, 2)
        if reason is None:
            violations.append("the breaker tripped but watch.db says it is closed")
        late = [e for e in events if e["event"] == "acted" and float(e["at"]) > float(trips[0]["at"])]
        if late:
            violations.append(f"{len(late)} fix(es) acted after the breaker tripped")
        decided = [e for e in events if e["event"] == "decided" and float(e["at"]) >= float(trips[0]["at"])]
        if any(e["verdict"] != "breaker_open" for e in decided):
            violations.append("a decision after the trip was not breaker_open")
    return out


def _window_holds(chaos: Chaos, trip: dict[str, Any], by_time: dict[str, Any]) -> bool:
    """A ``crossed_at`` later than the crossing all the round's crashes show is right when the crashes the
    rails knew at the trip crossed the line there: the hosts whose journal spoke are counted and decided
    before the others are polled, and one of those may hold an earlier crash. Its ``window`` must be real
    crashes (times the audit's detections give), more hosts than the count, inside one window ending at it."""
    said, window = float(trip["crossed_at"]), trip.get("window") or []
    c = chaos.config
    real = all(any(h == w["host"] and abs(at - float(w["at"])) <= 1e-3 for h, at in by_time["times"]) for w in window)
    inside = all(said - c.breaker_window_s <= float(w["at"]) <= said for w in window)
    ends = bool(window) and abs(max(float(w["at"]) for w in window) - said) <= 1e-3
    hosts = len({w["host"] for w in window})
    return real and inside and ends and hosts > (c.breaker_count or 0) and by_time["at"] <= said


def _injected_crossing(chaos: Chaos) -> float | None:
    """When the injected crashes themselves first put more than breaker_count hosts within one window."""
    c = chaos.config
    crashes = [(i.at, i.host) for i in chaos.injections if i.kind in ("crash", "burst", "startup")
               and i.result in ("crashed", "failed at startup")]  # fmt: skip
    for at, _ in crashes:
        if len({h for t, h in crashes if 0 <= at - t <= c.breaker_window_s}) > c.breaker_count:
            return at
    return None


def lines(report: dict[str, Any]) -> list[str]:
    """The counts, as the closing note gives them."""
    b = report["breaker"]
    cross = b["crossing"]
    note = []
    if b["matched"] == "process" and cross["state"] != cross["process"]:
        note = [f"NOTE: the watcher's crash window restarted with the watcher: counted across restarts the "
                f"threshold was crossed at {cross['state']}, and the breaker did not trip then"]  # fmt: skip
    injected, trip, by_time = b["injected_crossing_at"], b.get("trip_at"), b["by_time"]
    if (injected is None) != (trip is None) or (trip is not None and trip < injected):
        note.append(f"NOTE: the injected crashes crossed the threshold at {injected}, the breaker tripped at {trip} "
                    "(injections only: a fix's own crash before its rollback counts too; an injection's time is when "
                    "the request failed, not the exit line's)")  # fmt: skip
    return [
        f"seed {report['seed']}, {report['hosts']} hosts",
        f"injected: {json.dumps(report['injected'])}; watcher stopped: {json.dumps(report['watcher_stops'])}",
        f"incidents by outcome: {json.dumps(report['incidents'])}",
        f"steps: {json.dumps(report['steps'])}; events: {json.dumps(report['events'])}",
        f"units: {json.dumps(report['units'])}",
        f"breaker ({b['threshold']}): {b['trips']} trip(s) at round {b.get('trip_at')}; threshold crossed at "
        f"{json.dumps(b['crossing'])} (matched: {b['matched']}); "
        f"injected crashes crossed it at {b['injected_crossing_at']} "
        f"(the trip {b.get('trip_after_injected_crossing_s')} s after)",
        f"crash times: {by_time['crashes']} crashes counted once ({by_time['seen_again']} seen again, not counted; "
        f"{by_time['clamped']} clamped), {by_time['injected_matched']} injected crashes matched; crossed at crash "
        f"time {by_time['at']}, known in round {by_time['round']}; planned restarts and quotes: "
        f"{by_time.get('planned', 0)}, none counted",
        *note,
        f"violations: {len(report['violations'])}",
        *(f"  - {v}" for v in report["violations"]),
    ]
