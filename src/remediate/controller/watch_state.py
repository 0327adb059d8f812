"""The watcher's state in SQLite in the state directory (``watch.db``, WAL): cursors, hosts' histories,
incidents, pending approvals, the breaker, the breaker's crashes (each once, keyed by host, unit and the
crashed invocation, at its own time: a watcher restarted still counts its predecessor's crashes and never
counts one of them again) and the pause switch.

One transaction per decision (``with state.transaction():``); ``approve``/``deny``/``pause``/``resume``
from another process are plain short transactions, safe while the watcher runs (WAL, a busy timeout).
One active watcher per state: ``claim()`` takes an exclusive flock on ``watch.lock`` beside the database
and holds it for the watcher's life (the kernel drops it when the process dies, SIGKILL included).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from remediate.controller.state import check_no_link
from remediate.core.watch.detect import CrashTime
from remediate.core.watch.incident import HostHistory, Incident
from remediate.errors import ConfigError

DB = "watch.db"
LOCK = "watch.lock"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS cursors (host TEXT, unit TEXT, cursor TEXT, PRIMARY KEY (host, unit));
CREATE TABLE IF NOT EXISTS hosts (host TEXT PRIMARY KEY, fixes TEXT NOT NULL DEFAULT '[]',
    count_from REAL NOT NULL DEFAULT 0, healthy_since REAL, needs_human INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS incidents (id TEXT PRIMARY KEY, host TEXT, unit TEXT, opened_at REAL, last_at REAL,
    crashes INTEGER, kinds TEXT, closed INTEGER NOT NULL DEFAULT 0, outcome TEXT);
CREATE TABLE IF NOT EXISTS crashes (host TEXT, unit TEXT, key TEXT, at REAL, seen_at REAL,
    forgiven INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (host, unit, key));
CREATE INDEX IF NOT EXISTS crashes_at ON crashes (at);
CREATE TABLE IF NOT EXISTS approvals (id TEXT PRIMARY KEY, incident TEXT, host TEXT, created_at REAL,
    status TEXT NOT NULL DEFAULT 'pending', who TEXT, expires_at REAL);
"""


def corrupt(path: Path, exc: sqlite3.DatabaseError) -> ConfigError:
    """The one line for a database SQLite cannot read (not SQLite, truncated, malformed): which file, what to do."""
    return ConfigError(
        f"not a readable SQLite database ({exc}): move it aside (mv {path} {path}.corrupt); the watcher starts "
        "a new one (its cursors, incidents and approvals start empty)",
        source=str(path),
    )


@contextmanager
def database_errors(directory: Path) -> Iterator[None]:
    """SQLite's errors of a corrupt ``watch.db`` as :func:`corrupt`'s ConfigError (one line, exit 2)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise  # another process's transaction, not a broken file
        raise ConfigError(f"cannot use the watcher's database ({exc})", source=str(directory / DB)) from None
    except sqlite3.DatabaseError as exc:
        raise corrupt(directory / DB, exc) from None


def open_state(directory: Path) -> WatchState:
    """The state of ``directory`` (a checked state directory), its ``watch.db`` never a link; a corrupt
    database is :func:`corrupt`'s one line, not SQLite's exception."""
    check_no_link(directory / DB)  # sqlite opens by name: never a link to another file
    with database_errors(directory):
        return WatchState(directory)


class WatchState:
    """The database of one state directory; every method is one short transaction unless inside ``transaction()``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock_fd: int | None = None
        self._db = sqlite3.connect(directory / DB, timeout=10.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        columns = [r[1] for r in self._db.execute("PRAGMA table_info(crashes)")]
        if columns and "key" not in columns:  # the first window's table (host, at): counted at detection
            self._db.execute("DROP TABLE crashes")
        self._db.executescript(_SCHEMA)
        approvals = [r[1] for r in self._db.execute("PRAGMA table_info(approvals)")]
        if "expires_at" not in approvals:  # an older state: its approvals never expire (NULL)
            self._db.execute("ALTER TABLE approvals ADD COLUMN expires_at REAL")
        self._depth = 0

    def close(self) -> None:
        self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def claim(self) -> None:
        """Become the one watcher of this state; ConfigError when another process holds it."""
        fd = os.open(self.directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                "another watcher runs on this state (one watcher per state directory)",
                source=str(self.directory / LOCK),
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One decision's reads and writes, all or nothing (BEGIN IMMEDIATE: writers queue, readers go on)."""
        if self._depth:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")
        finally:
            self._depth = 0

    # switches ---------------------------------------------------------------------------------------------
    def _get(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set(self, key: str, value: str | None) -> None:
        if value is None:
            self._db.execute("DELETE FROM kv WHERE key = ?", (key,))
        else:
            self._db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))

    def is_paused(self) -> bool:
        return self._get("paused") is not None

    def set_paused(self, is_paused: bool) -> None:
        self._set("paused", "1" if is_paused else None)

    def breaker_reason(self) -> str | None:
        return self._get("breaker")

    def trip_breaker(self, reason: str) -> None:
        self._set("breaker", reason)

    def reset_breaker(self) -> None:
        """Re-arm the breaker: the crashes counted so far are forgiven (a person looked at them)."""
        self._set("breaker", None)
        self._db.execute("UPDATE crashes SET forgiven = 1")

    def acting(self, incident: str) -> str | None:
        """The instance id of the watcher that started this incident's fix (kept until the incident is
        closed): a random id per watcher start, never a PID (as PID 1 of a container every watcher has the same)."""
        return self._get(f"acting:{incident}")

    def set_acting(self, incident: str, instance: str | None) -> None:
        self._set(f"acting:{incident}", instance)

    # cursors and hosts -----------------------------------------------------------------------------------
    def cursor(self, host: str, unit: str) -> str | None:
        row = self._db.execute("SELECT cursor FROM cursors WHERE host = ? AND unit = ?", (host, unit)).fetchone()
        return None if row is None else str(row[0])

    def save_cursor(self, host: str, unit: str, cursor: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO cursors VALUES (?, ?, ?)", (host, unit, cursor))

    def history(self, host: str) -> HostHistory:
        row = self._db.execute(
            "SELECT fixes, count_from, healthy_since, needs_human FROM hosts WHERE host = ?", (host,)
        ).fetchone()
        if row is None:
            return HostHistory()
        return HostHistory(tuple(float(t) for t in json.loads(row[0])), float(row[1]), row[2], bool(row[3]))

    def save_history(self, host: str, history: HostHistory) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO hosts VALUES (?, ?, ?, ?, ?)",
            (
                host,
                json.dumps(list(history.fixes)),
                history.count_from,
                history.healthy_since,
                int(history.is_needs_human),
            ),
        )

    # the breaker's window --------------------------------------------------------------------------------
    def note_crashes(
        self, host: str, unit: str, crashes: tuple[CrashTime, ...], seen_at: float, keep_s: float
    ) -> list[bool]:
        """Record crashes (key, crash time) of a host's unit seen at ``seen_at``; whether each is new (a crash
        already recorded, by this watcher or an earlier one, is not counted again). Crashes older than
        ``keep_s`` before ``seen_at`` are forgotten."""
        new = []
        for crash in crashes:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO crashes VALUES (?, ?, ?, ?, ?, 0)", (host, unit, crash.key, crash.at, seen_at)
            )
            new.append(cur.rowcount == 1)
        self._db.execute("DELETE FROM crashes WHERE at < ?", (seen_at - keep_s,))
        return new

    def recent_crashes(self, since: float) -> tuple[tuple[str, float], ...]:
        """(host, crash time) of the crashes since ``since`` not forgiven by a resume, oldest first."""
        rows = self._db.execute(
            "SELECT host, at FROM crashes WHERE at >= ? AND forgiven = 0 ORDER BY at", (since,)
        ).fetchall()
        return tuple((str(h), float(t)) for h, t in rows)

    # incidents and approvals -----------------------------------------------------------------------------
    def open_incident(self, host: str, unit: str) -> Incident | None:
        row = self._db.execute(
            "SELECT id, host, unit, opened_at, last_at, crashes, kinds, closed FROM incidents"
            " WHERE host = ? AND unit = ? AND closed = 0 ORDER BY last_at DESC LIMIT 1",
            (host, unit),
        ).fetchone()
        if row is None:
            return None
        return Incident(row[0], row[1], row[2], row[3], row[4], row[5], tuple(json.loads(row[6])), bool(row[7]))

    def save_incident(self, incident: Incident, outcome: str | None = None) -> None:
        """Insert or update; an outcome of None keeps the one saved."""
        self._db.execute(
            "INSERT INTO incidents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
            " last_at = excluded.last_at, crashes = excluded.crashes, kinds = excluded.kinds,"
            " closed = excluded.closed, outcome = COALESCE(excluded.outcome, incidents.outcome)",
            (
                incident.id,
                incident.host,
                incident.unit,
                incident.opened_at,
                incident.last_at,
                incident.crashes,
                json.dumps(list(incident.kinds)),
                int(incident.is_closed),
                outcome,
            ),
        )

    def outcome(self, incident: str) -> str | None:
        row = self._db.execute("SELECT outcome FROM incidents WHERE id = ?", (incident,)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def save_incident_outcome(self, incident: str, outcome: str) -> None:
        self._db.execute("UPDATE incidents SET outcome = ? WHERE id = ?", (outcome, incident))

    def incidents(self, limit: int = 20) -> list[dict[str, object]]:
        cur = self._db.execute("SELECT * FROM incidents ORDER BY last_at DESC LIMIT ?", (limit,))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def request_approval(self, approval_id: str, incident: str, host: str, at: float, ttl_s: float) -> None:
        self._db.execute(
            "INSERT OR IGNORE INTO approvals (id, incident, host, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
            (approval_id, incident, host, at, at + ttl_s),
        )

    def answer(self, approval_id: str, *, approve: bool, who: str, now: float) -> None:
        """``approve ID`` / ``deny ID`` at ``now``; ConfigError when no such approval is pending, or it expired
        (the watcher marks it ``expired`` at its next round; an answer after its time is refused meanwhile)."""
        where = str(self.directory / DB)
        row = self._db.execute("SELECT status, expires_at FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        if row is not None and (row[0] == "expired" or (row[0] == "pending" and row[1] is not None and now > row[1])):
            raise ConfigError(
                f"approval {approval_id!r} expired (the policy's approval_ttl): nothing done", source=where
            )
        status = "approved" if approve else "denied"
        cur = self._db.execute(
            "UPDATE approvals SET status = ?, who = ? WHERE id = ? AND status = 'pending'", (status, who, approval_id)
        )
        if cur.rowcount != 1:
            raise ConfigError(f"no pending approval {approval_id!r}", source=where)

    def approval(self, approval_id: str) -> tuple[str, str | None] | None:
        row = self._db.execute("SELECT status, who FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return None if row is None else (str(row[0]), row[1])

    def approval_expires_at(self, approval_id: str) -> float | None:
        row = self._db.execute("SELECT expires_at FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def expire_approval(self, approval_id: str) -> None:
        self._db.execute("UPDATE approvals SET status = 'expired' WHERE id = ?", (approval_id,))

    def pending(self) -> list[tuple[str, str, str]]:
        rows = self._db.execute("SELECT id, incident, host FROM approvals WHERE status = 'pending' ORDER BY created_at")
        return [(str(a), str(b), str(c)) for a, b, c in rows.fetchall()]

    # what `watch status` lists --------------------------------------------------------------------------------
    def watched(self) -> list[tuple[str, str]]:
        """(host, unit) of every unit a watcher polled (its cursor saved), and every host with a history."""
        rows = self._db.execute("SELECT host, unit FROM cursors UNION SELECT host, '' FROM hosts ORDER BY host")
        return [(str(h), str(u)) for h, u in rows.fetchall()]

    def open_incidents(self) -> list[dict[str, object]]:
        cur = self._db.execute(
            "SELECT id, host, unit, opened_at, last_at, crashes, outcome FROM incidents WHERE closed = 0"
            " ORDER BY opened_at"
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def pending_approvals(self) -> list[dict[str, object]]:
        """Approvals not yet acted on: asked for, or given and waiting for the rails."""
        cur = self._db.execute(
            "SELECT a.id, a.incident, a.host, a.status, a.who, a.created_at, a.expires_at FROM approvals a"
            " JOIN incidents i ON i.id = a.incident WHERE a.status IN ('pending', 'approved')"
            " AND i.outcome = 'wait_approval' AND i.closed = 0 ORDER BY a.created_at"
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
