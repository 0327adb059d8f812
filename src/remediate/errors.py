"""The single exception tree of remediate.

::

    RemediateError
    ├─ ConfigError            exit 2   bad input: inventory, flags, unit-file content, templates
    │  ├─ OwnedElsewhereError          the value lives in another file (EnvironmentFile=, $VAR)
    │  ├─ SeveralUnitsError            several units run sglang and none was named; carries their names
    │  └─ UnsafePathError              a file to write or restore is in a directory another user can change
    ├─ TransportError         exit 3
    │  ├─ ConnectError                 DNS / refused / timeout: retryable
    │  │  └─ ConnectionLost            the connection died (or a command timed out) while a command ran
    │  ├─ AuthError                    authentication, sudo password, host-key mismatch: never retried
    │  └─ CommandError                 a remote action exited non-zero; carries the CommandResult
    └─ RemediationError       exit 1   applied, but the host did not become healthy / verify failed
       ├─ ConflictError                the unit changed under us, or another run holds the lock
       │  └─ LockHeldError             another run holds the unit's lock
       ├─ RefusedError                 the crash evidence contradicts the OOM recipe; nothing was changed
       ├─ CommitError                  the commit script failed; says which files hold the new bytes
       ├─ StateUnknownError            the connection was lost mid-transaction and not re-established
       └─ UnhealthyError               the server failed, crashed or timed out while we waited

Exceptions store data and build their message in ``__str__``. Anything that is not a
``RemediateError`` reaching the CLI is a bug: it prints a traceback and exits 70.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remediate.models import CommandResult

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_BUG = 70


class RemediateError(Exception):
    """Base of every error remediate raises on purpose."""

    exit_code = EXIT_FAILED


class ConfigError(RemediateError):
    """Bad input: a flag, an inventory, a unit file. Nothing was changed anywhere."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.source = source

    def __str__(self) -> str:
        return f"{self.source}: {self.message}" if self.source else self.message


class OwnedElsewhereError(ConfigError):
    """A setting is not in the file we were given; ``where`` names the file that owns it."""

    def __init__(self, setting: str, where: str, *, source: str | None = None) -> None:
        super().__init__(f"{setting} comes from {where}", source=source)
        self.setting = setting
        self.where = where


class SeveralUnitsError(ConfigError):
    """Several units run sglang on the host and ``--unit`` named none: the fleet runs each (host/units.py);
    ``units`` holds their names."""

    def __init__(self, units: tuple[str, ...], *, source: str | None = None) -> None:
        super().__init__(f"several units run sglang or vLLM ({', '.join(units)}); pass --unit", source=source)
        self.units = units


class UnsafePathError(ConfigError):
    """A file to write (or a backup to restore) is a name another user controls: a directory not owned by
    root or writable by others, a symlinked or foreign-owned backup. Refused before anything is written;
    ``source`` is the host (or the local file)."""


class _HostError(RemediateError):
    """An error on one host: the message is prefixed with the host's name."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.message = message

    def __str__(self) -> str:
        return f"{self.host}: {self.message}"


class TransportError(_HostError):
    """The host could not be reached or a remote command failed."""

    exit_code = EXIT_UNREACHABLE


class ConnectError(TransportError):
    """DNS failure, connection refused, timeout: worth retrying."""


class ConnectionLost(ConnectError):
    """The connection died, or a command outlived its timeout, while a command ran: its outcome on the
    host is unknown (it may have run to its end, part of the way, or not at all)."""


class AuthError(TransportError):
    """Authentication, sudo password, or host-key failure: never retried."""


class CommandError(TransportError):
    """A remote action exited non-zero."""

    exit_code = EXIT_FAILED

    def __init__(self, host: str, what: str, result: CommandResult) -> None:
        self.what = what
        self.result = result
        super().__init__(host, what)

    def __str__(self) -> str:
        tail = (self.result.stderr.strip() or self.result.stdout.strip()).splitlines()[-3:]
        detail = " | ".join(tail)
        return f"{self.host}: {self.what} failed (exit {self.result.exited})" + (f": {detail}" if detail else "")


class RemediationError(_HostError):
    """The change was applied (or attempted) but the host is not healthy."""

    exit_code = EXIT_FAILED


class ConflictError(RemediationError):
    """The unit changed between read and commit, or another run holds the lock."""


class LockHeldError(ConflictError):
    """Another remediation held the unit's lock for longer than we wait; nothing was read or written."""

    def __init__(self, host: str) -> None:
        super().__init__(host, f"another remediation holds the lock on {host}")


class RefusedError(RemediationError):
    """The unit's latest failure contradicts the OOM recipe (``remediate diagnose`` says why); nothing changed."""


class CommitError(RemediationError):
    """The commit script failed. ``written``: paths that hold the new bytes now (empty: nothing changed,
    no undo is needed); ``reloaded``/``restarted``: how far systemd got."""

    def __init__(
        self,
        host: str,
        message: str,
        *,
        written: tuple[str, ...] = (),
        backups: tuple[str, ...] = (),
        reloaded: bool = False,
        restarted: bool = False,
    ) -> None:
        super().__init__(host, message)
        self.written = written
        self.backups = backups
        self.reloaded = reloaded
        self.restarted = restarted


class StateUnknownError(RemediationError):
    """The connection was lost mid-transaction and could not be re-established in time: what the host
    holds now is not known. The message says what was done before the cut and that re-running is safe."""


class UnhealthyError(RemediationError):
    """The server did not become healthy: failed unit, crash loop, or timeout."""

    def __init__(self, host: str, message: str, *, journal: list[str] | None = None) -> None:
        super().__init__(host, message)
        self.journal = journal or []
