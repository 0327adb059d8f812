"""The controller's state directory, resolved in one place for every file remediate keeps on this machine.

``$REMEDIATE_STATE_DIR``, else ``$XDG_STATE_HOME/remediate``, else ``~/.local/state/remediate`` (the XDG
base-directory default; a relative ``$XDG_STATE_HOME`` is ignored, as the specification says). Created
private (0700) on first use.

Root writes here, so nothing here may be swapped by anyone else: the directory must be the running user's
(owned by them, not writable by group or others; refused in one line, exit 2, otherwise), and every file in
it is opened without following a link (``O_NOFOLLOW``; a new one ``O_CREAT|O_EXCL``, then ``fchmod`` 0600).
A line is appended whole or not at all (:func:`append_line`): a short ``write(2)`` is retried, a full disk
takes the partial line back and refuses the record in one line naming the file.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from remediate.errors import ConfigError

ENV = "REMEDIATE_STATE_DIR"
TRANSACTIONS = "transactions.jsonl"
_APPENDS = threading.Lock()  # this process's appends, one at a time (parallel hosts record at once)


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where remediate keeps its controller-side state (not created here); ``env`` defaults to ``os.environ``."""
    env = os.environ if env is None else env
    explicit = env.get(ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_STATE_HOME")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else home / ".local" / "state"
    return base / "remediate"


def check_private_dir(path: Path) -> None:
    """``path`` is a directory of the running user's alone: owned by them and not writable by group or
    others (no one else can put a link or a file of theirs there). ConfigError naming it otherwise."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"cannot read the state directory: {exc.strerror}", source=str(path)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError("the state directory is not a directory: fix it or set REMEDIATE_STATE_DIR", source=str(path))
    me = os.geteuid()
    if st.st_uid != me:
        raise ConfigError(
            f"the state directory is owned by uid {st.st_uid}, not by this user (uid {me}): nothing is read or "
            "written there; use a directory of your own (REMEDIATE_STATE_DIR)",
            source=str(path),
        )
    if st.st_mode & 0o022:
        raise ConfigError(
            f"the state directory is writable by group or others (mode {st.st_mode & 0o7777:o}): "
            f"chmod go-w {path}, or set REMEDIATE_STATE_DIR",
            source=str(path),
        )


def ensure_dir(path: Path) -> Path:
    """``path`` as a private directory (0700), created with its parents and checked (:func:`check_private_dir`);
    ConfigError when it cannot be."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the state directory: {exc.strerror}", source=str(path)) from None
    check_private_dir(path)
    return path


def check_no_link(path: Path) -> None:
    """A state file is a regular file or absent, never a symbolic link (nothing is written through one)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", source=str(path)) from None
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError("is a symbolic link: nothing is written through a link; remove it", source=str(path))
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError("is not a regular file: move it aside", source=str(path))


def _refused(path: Path, exc: OSError) -> ConfigError:
    if exc.errno == errno.ELOOP:
        return ConfigError("is a symbolic link: nothing is written through a link; remove it", source=str(path))
    return ConfigError(f"cannot open: {exc.strerror or exc}", source=str(path))


def open_state_file(path: Path, flags: int) -> int:
    """A descriptor on the regular file ``path``, never through a link: an existing file of this user's (its
    mode set to 0600), else a new one (``O_CREAT|O_EXCL``, 0600 whatever the umask). ``flags``: the access
    (``O_RDWR | O_APPEND``…). ConfigError naming the file when it cannot be."""
    base = flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO planted here never blocks us
    for _ in range(5):
        try:
            fd = os.open(path, base)
        except FileNotFoundError:
            try:
                fd = os.open(path, base | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue  # created meanwhile: open it as it is
            except OSError as exc:
                raise _refused(path, exc) from None
        except OSError as exc:
            raise _refused(path, exc) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise ConfigError("is not a regular file of this user's: move it aside", source=str(path))
        os.fchmod(fd, 0o600)
        return fd
    raise ConfigError("keeps changing while it is opened", source=str(path))


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data``: a short ``write(2)`` is carried on from where it stopped. OSError when the file
    takes no more (a full disk: ENOSPC)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def append_line(path: Path, line: bytes, *, sync: bool = False) -> None:
    """Append one line (ending in a newline) to the state file ``path``, whole or not at all: after a line left
    cut by a crash a newline comes first (two records are never glued on one line); when the disk is full,
    what was written of this line is taken back and the record refused (ConfigError naming the file)."""
    with _APPENDS:
        fd = open_state_file(path, os.O_RDWR | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            data = line if size == 0 or os.pread(fd, 1, size - 1) == b"\n" else b"\n" + line
            try:
                write_all(fd, data)
                if sync:
                    os.fsync(fd)
            except OSError as exc:
                with suppress(OSError):
                    if os.fstat(fd).st_size <= size + len(data):  # no other process appended meanwhile
                        os.ftruncate(fd, size)
                raise ConfigError(
                    f"the record was not written ({exc.strerror or exc}): free space there, or set REMEDIATE_STATE_DIR",
                    source=str(path),
                ) from None
        finally:
            os.close(fd)


def read_state_file(path: Path) -> str | None:
    """The text of the state file ``path`` (None when absent), read without following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refused(path, exc) from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError("is not a regular file: move it aside", source=str(path))
        return handle.read().decode("utf-8", "replace")


def check_state_dir() -> Path:
    """Before any host is touched: the state directory exists (created 0700), is this user's alone and root
    can write it, and its transaction record is no link; ConfigError naming the path otherwise."""
    path = ensure_dir(state_dir())
    record = path / TRANSACTIONS
    check_no_link(record)
    for target in (path, record):
        if target.exists() and not os.access(target, os.W_OK | (os.X_OK if target.is_dir() else 0)):
            raise ConfigError("cannot write here (permissions): fix it or set REMEDIATE_STATE_DIR", source=str(target))
    return path
