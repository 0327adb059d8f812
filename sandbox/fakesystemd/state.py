"""Runtime state under /run/fake-systemd, the journal file and the systemctl audit log."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator

from fakesystemd import unit as unitfile

STATE_DIR = "/run/fake-systemd"
LOADED_DIR = STATE_DIR + "/loaded"
UNITS_DIR = STATE_DIR + "/units"
JOURNAL = "/var/log/fake-journal.jsonl"
AUDIT_LOG = "/var/log/systemctl-audit.log"
BOOT_ID_FILE = STATE_DIR + "/boot_id"

SIGNAL_NAMES = {
    1: "HUP",
    2: "INT",
    3: "QUIT",
    4: "ILL",
    5: "TRAP",
    6: "ABRT",
    7: "BUS",
    8: "FPE",
    9: "KILL",
    10: "USR1",
    11: "SEGV",
    12: "USR2",
    13: "PIPE",
    14: "ALRM",
    15: "TERM",
}
EXIT_NAMES = {
    0: "SUCCESS",
    1: "FAILURE",
    2: "INVALIDARGUMENT",
    3: "NOTIMPLEMENTED",
    4: "NOPERMISSION",
    5: "NOTINSTALLED",
    6: "NOTCONFIGURED",
    7: "NOTRUNNING",
    200: "CHDIR",
    203: "EXEC",
    217: "USER",
}


def boot_id() -> str:
    try:
        with open(BOOT_ID_FILE) as f:
            return f.read().strip()
    except OSError:
        os.makedirs(STATE_DIR, exist_ok=True)
        value = uuid.uuid4().hex
        with open(BOOT_ID_FILE, "w") as f:
            f.write(value)
        return value


def default_state() -> dict[str, object]:
    return {
        "active_state": "inactive",
        "sub_state": "dead",
        "result": "success",
        "n_restarts": 0,
        "main_pid": 0,
        "supervisor_pid": 0,
        "invocation_id": "",
        "exec_main_start": 0.0,
        "exec_main_exit": 0.0,
        "exec_main_pid": 0,
        "exec_main_code": 0,
        "exec_main_status": 0,
        "active_enter": 0.0,
        "inactive_enter": 0.0,
        "state_change": 0.0,
        "ratelimit_begin": 0.0,
        "ratelimit_num": 0,
    }


def _state_path(name: str) -> str:
    return os.path.join(UNITS_DIR, name + ".json")


def read_state(name: str) -> dict[str, object]:
    state = default_state()
    try:
        with open(_state_path(name)) as f:
            state.update(json.load(f))
    except (OSError, ValueError):
        pass
    sup = state.get("supervisor_pid") or 0
    # A supervisor that vanished (host reset, SIGKILL) leaves a unit that is not running any more.
    if sup and not _alive(int(sup)) and state["active_state"] in ("active", "activating", "deactivating"):
        state.update(active_state="failed", sub_state="failed", result="signal", main_pid=0, supervisor_pid=0)
    return state


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def write_state(name: str, state: dict[str, object]) -> None:
    os.makedirs(UNITS_DIR, exist_ok=True)
    tmp = _state_path(name) + f".{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, _state_path(name))


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    os.makedirs(UNITS_DIR, exist_ok=True)
    fd = os.open(os.path.join(UNITS_DIR, name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update_state(name: str, **changes: object) -> dict[str, object]:
    with locked(name):
        state = read_state(name)
        if changes.get("active_state") and changes["active_state"] != state["active_state"]:
            changes.setdefault("state_change", time.time())
        state.update(changes)
        write_state(name, state)
        return state


# -- loaded definitions (what daemon-reload snapshots) ---------------------------------------------------
def _loaded_path(name: str) -> str:
    return os.path.join(LOADED_DIR, name + ".json")


def save_loaded(name: str, definition: dict[str, object]) -> None:
    os.makedirs(LOADED_DIR, exist_ok=True)
    tmp = _loaded_path(name) + f".{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(definition, f)
    os.replace(tmp, _loaded_path(name))


def get_loaded(name: str) -> dict[str, object]:
    """The loaded definition; a unit never loaded is loaded from disk on first use, as systemd does."""
    try:
        with open(_loaded_path(name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    definition = unitfile.load(name)
    if definition["load_state"] != "not-found":
        save_loaded(name, definition)
    return definition


def loaded_names() -> list[str]:
    try:
        return sorted(e[: -len(".json")] for e in os.listdir(LOADED_DIR) if e.endswith(".json"))
    except OSError:
        return []


def forget_loaded(name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(_loaded_path(name))


def need_daemon_reload(definition: dict[str, object]) -> bool:
    if definition.get("load_state") == "not-found":
        return False
    return unitfile.disk_fingerprint(str(definition["name"])) != definition.get("fingerprint")


# -- journal -------------------------------------------------------------------------------------------
def journal(
    unit: str, message: str, *, ident: str = "systemd", pid: int = 1, invocation: str = "", priority: int = 6
) -> None:
    entry = {
        "t": time.time(),
        "u": unit,
        "id": ident,
        "pid": pid,
        "inv": invocation,
        "m": message,
        "b": boot_id(),
        "p": priority,
        "h": socket.gethostname(),
    }
    line = (json.dumps(entry) + "\n").encode()
    os.makedirs(os.path.dirname(JOURNAL), exist_ok=True)
    fd = os.open(JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def audit(argv: list[str]) -> None:
    if os.environ.get("FAKE_SYSTEMD_NO_AUDIT") == "1":
        return
    entry = {
        "t": time.time(),
        "argv": ["systemctl", *argv[1:]],
        "uid": os.getuid(),
        "user": os.environ.get("SUDO_USER") or os.environ.get("USER", ""),
    }
    fd = os.open(AUDIT_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def fmt_timestamp(t: float) -> str:
    if not t:
        return ""
    return time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(t))


def describe_exit(code: str, status: int) -> str:
    """'code=exited, status=1/FAILURE' / 'code=killed, status=9/KILL'."""
    if code == "killed":
        return f"code=killed, status={status}/{SIGNAL_NAMES.get(status, str(status))}"
    name = EXIT_NAMES.get(status)
    return f"code=exited, status={status}/{name}" if name else f"code=exited, status={status}"
