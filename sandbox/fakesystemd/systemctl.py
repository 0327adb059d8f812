"""A daemon-less `systemctl` with systemd's semantics for the commands the tool (and tests) use."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

from fakesystemd import state as st
from fakesystemd import unit as unitfile
from fakesystemd.supervisor import _descendants, ratelimit_hit, start_limit_hit

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUPERVISOR_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from fakesystemd.supervisor import main; sys.exit(main(sys.argv[1:]))"
)
ACTIVE_STATES = ("active", "activating", "deactivating", "reloading")


class Usage(Exception):
    pass


class Options:
    def __init__(self) -> None:
        self.properties: list[str] = []
        self.value = False
        self.all = False
        self.no_legend = False
        self.plain = False
        self.quiet = False
        self.now = False
        self.types: list[str] = []
        self.states: list[str] = []
        self.signal = "SIGTERM"
        self.kill_whom = "all"
        self.lines = 10


VALUE_OPTS = {
    "-p",
    "--property",
    "-P",
    "-t",
    "--type",
    "--state",
    "-s",
    "--signal",
    "--kill-whom",
    "-n",
    "--lines",
    "-o",
    "--output",
    "-H",
    "--host",
    "-M",
    "--machine",
    "--job-mode",
}


def parse_args(args: list[str]) -> tuple[str, list[str], Options]:
    opts, positional = Options(), []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional.extend(args[i + 1 :])
            break
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        elif arg in VALUE_OPTS:
            if i + 1 >= len(args):
                raise Usage(f"option '{arg}' requires an argument")
            name, value = arg, args[i + 1]
            i += 1
        elif arg.startswith("-") and len(arg) > 2 and arg[:2] in ("-p", "-P", "-t", "-s", "-n", "-o"):
            name, value = arg[:2], arg[2:]
        else:
            name, value = arg, None
        i += 1
        if value is None and not name.startswith("-"):
            positional.append(name)
        elif name in ("-p", "--property"):
            opts.properties.extend(p for p in value.split(",") if p)
        elif name == "-P":
            opts.properties.extend(p for p in value.split(",") if p)
            opts.value = True
        elif name == "--value":
            opts.value = True
        elif name in ("-a", "--all"):
            opts.all = True
        elif name == "--no-legend":
            opts.no_legend = True
        elif name == "--plain":
            opts.plain = True
        elif name in ("-q", "--quiet"):
            opts.quiet = True
        elif name == "--now":
            opts.now = True
        elif name in ("-t", "--type"):
            opts.types.extend(value.split(","))
        elif name == "--state":
            opts.states.extend(value.split(","))
        elif name == "--failed":
            opts.states.append("failed")
        elif name in ("-s", "--signal"):
            opts.signal = value if value.startswith("SIG") or value.isdigit() else "SIG" + value
        elif name == "--kill-whom":
            opts.kill_whom = value
        elif name in ("-n", "--lines"):
            opts.lines = int(value)
        elif name in ("-H", "--host", "-M", "--machine", "--user"):
            raise Usage(f"{name} is not supported in the sandbox")
        # --no-pager, --no-block, --no-ask-password, --system, -l/--full, -o, --job-mode: accepted, ignored
    if not positional:
        return "list-units", [], opts
    return positional[0], positional[1:], opts


def err(msg: str) -> None:
    sys.stderr.write(msg + "\n")


def warn_changed(definition: dict) -> None:
    if st.need_daemon_reload(definition):
        err(
            f"Warning: The unit file, source configuration file or drop-ins of {definition['name']} changed on "
            "disk. Run 'systemctl daemon-reload' to reload units."
        )


def _alive(pid: int) -> bool:
    return bool(pid) and st._alive(pid)


def _wait_exit(pid: int, timeout: float) -> bool:
    """Wait for a (non-child) process to exit, without polling when pidfds work."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = -1
    try:
        while _alive(pid):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if fd >= 0:
                select.select([fd], [], [], min(remaining, 0.05))
            else:
                time.sleep(min(remaining, 0.005))
        return True
    finally:
        if fd >= 0:
            os.close(fd)


# -- verbs -----------------------------------------------------------------------------------------------
def do_start(name: str, opts: Options) -> int:
    definition = st.get_loaded(name)
    if definition["load_state"] == "not-found":
        err(f"Failed to start {name}: Unit {name} not found.")
        return 5
    warn_changed(definition)
    if definition["load_state"] != "loaded":
        err(
            f"Failed to start {name}: Unit {name} has a bad unit file setting.\n"
            f"See system logs and 'systemctl status {name}' for details."
        )
        return 1
    state = st.read_state(name)
    if state["active_state"] in ("active", "deactivating") and _alive(int(state["supervisor_pid"])):
        return 0
    if state["active_state"] == "activating" and _alive(int(state["supervisor_pid"])):
        do_stop(name, opts, quiet_journal=True)
    if ratelimit_hit(name, definition):
        start_limit_hit(name, str(definition.get("description") or name))
        return _job_failed(name)
    st.update_state(name, active_state="activating", sub_state="start", result="success")
    read_fd, write_fd = os.pipe()
    log = os.open(os.path.join(st.UNITS_DIR, name + ".supervisor.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    subprocess.Popen(
        [sys.executable, "-IS", "-c", SUPERVISOR_BOOT, PKG_ROOT, name, str(write_fd)],
        pass_fds=(write_fd,),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        cwd="/",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    os.close(write_fd)
    os.close(log)
    chunks = []
    while True:
        chunk = os.read(read_fd, 256)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    answer = b"".join(chunks).decode()
    if answer == "fail:resources":
        err(
            f"Job for {name} failed because of unavailable resources or another system error.\n"
            f'See "systemctl status {name}" and "journalctl -xeu {name}" for details.'
        )
        return 1
    if not answer:
        st.update_state(name, active_state="failed", sub_state="failed", result="resources")
        return _job_failed(name)
    return 0


def _job_failed(name: str) -> int:
    err(f'Job for {name} failed.\nSee "systemctl status {name}" and "journalctl -xeu {name}" for details.')
    return 1


def do_stop(name: str, opts: Options, quiet_journal: bool = False) -> int:
    definition = st.get_loaded(name)
    if definition["load_state"] == "not-found" and not os.path.exists(os.path.join(st.UNITS_DIR, name + ".json")):
        err(f"Failed to stop {name}: Unit {name} not loaded.")
        return 5
    warn_changed(definition)
    state = st.read_state(name)
    sup = int(state["supervisor_pid"])
    if _alive(sup):
        desc = definition.get("description") or name
        if state["active_state"] == "active" and not quiet_journal:
            st.journal(name, f"Stopping {name} - {desc}...")
        st.update_state(name, active_state="deactivating", sub_state="stop-sigterm")
        with contextlib.suppress(ProcessLookupError):
            os.kill(sup, signal.SIGTERM)
        if not _wait_exit(sup, float(definition.get("timeout_stop_sec", 90.0)) + 5):
            with contextlib.suppress(ProcessLookupError):
                os.kill(sup, signal.SIGKILL)
    st.update_state(name, n_restarts=0)  # a manual stop flushes the restart counter
    return 0


def do_restart(name: str, opts: Options) -> int:
    definition = st.get_loaded(name)
    if definition["load_state"] == "not-found":
        err(f"Failed to restart {name}: Unit {name} not found.")
        return 5
    warn_changed(definition)
    os.environ["_FAKE_SYSTEMD_WARNED"] = "1"
    do_stop_silently(name, opts)
    return do_start_silently(name, opts)


def do_stop_silently(name: str, opts: Options) -> int:
    with _no_warning():
        return do_stop(name, opts)


def do_start_silently(name: str, opts: Options) -> int:
    with _no_warning():
        return do_start(name, opts)


@contextlib.contextmanager
def _no_warning():  # type: ignore[no-untyped-def]
    global warn_changed
    saved = warn_changed
    warn_changed = lambda definition: None  # noqa: E731
    try:
        yield
    finally:
        warn_changed = saved


def do_try_restart(name: str, opts: Options) -> int:
    if st.read_state(name)["active_state"] in ACTIVE_STATES:
        return do_restart(name, opts)
    return 0


def do_reload(name: str, opts: Options) -> int:
    err(f"Failed to reload {name}: Job type reload is not applicable for unit {name}.")
    return 1


def do_daemon_reload() -> int:
    names = set(st.loaded_names())
    for d in unitfile.UNIT_DIRS:
        with contextlib.suppress(OSError):
            for entry in os.listdir(d):
                path = os.path.join(d, entry)
                if entry.endswith(".service") and os.path.isfile(path) and os.path.realpath(path) != "/dev/null":
                    names.add(entry)
    for name in sorted(names):
        definition = unitfile.load(name)
        if definition["load_state"] == "not-found":
            st.forget_loaded(name)
        else:
            st.save_loaded(name, definition)
    return 0


def do_reset_failed(names: list[str]) -> int:
    targets = names or sorted(set(st.loaded_names()) | set(_state_names()))
    rc = 0
    for name in targets:
        if names and st.get_loaded(name)["load_state"] == "not-found" and name not in _state_names():
            err(f"Failed to reset failed state of unit {name}: Unit {name} not loaded.")
            rc = 1
            continue
        with st.locked(name):
            state = st.read_state(name)
            if state["active_state"] == "failed":
                state.update(active_state="inactive", sub_state="dead", state_change=time.time())
            state.update(result="success", n_restarts=0, ratelimit_begin=0.0, ratelimit_num=0)
            st.write_state(name, state)
    return rc


def _state_names() -> list[str]:
    try:
        return [e[: -len(".json")] for e in os.listdir(st.UNITS_DIR) if e.endswith(".json")]
    except OSError:
        return []


def do_is_active(names: list[str], opts: Options) -> int:
    rc = 3
    for name in names:
        active = st.read_state(name)["active_state"]
        if not opts.quiet:
            print(active)
        if active in ("active", "reloading"):
            rc = 0
    return rc


def do_is_failed(names: list[str], opts: Options) -> int:
    rc = 1
    for name in names:
        active = st.read_state(name)["active_state"]
        if not opts.quiet:
            print(active)
        if active == "failed":
            rc = 0
    return rc


def _wants_dir(definition: dict) -> list[str]:
    return [os.path.join("/etc/systemd/system", t + ".wants") for t in definition.get("wanted_by", [])]


def do_enable(name: str, opts: Options, enable: bool) -> int:
    definition = unitfile.load(name)
    if definition["load_state"] == "not-found":
        err(f"Failed to {'enable' if enable else 'disable'} unit: Unit file {name} does not exist.")
        return 1
    for wants in _wants_dir(definition):
        link = os.path.join(wants, name)
        if enable and not os.path.lexists(link):
            os.makedirs(wants, exist_ok=True)
            os.symlink(definition["fragment"], link)
            err(f"Created symlink {link} \u2192 {definition['fragment']}.")
        elif not enable and os.path.lexists(link):
            os.unlink(link)
            err(f'Removed "{link}".')
    if opts.now:
        return do_start(name, opts) if enable else do_stop(name, opts)
    return 0


def enabled_state(name: str) -> str:
    definition = unitfile.load(name)
    if definition["load_state"] == "not-found":
        return "not-found"
    wants = _wants_dir(definition)
    if not wants:
        return "static"
    return "enabled" if any(os.path.lexists(os.path.join(w, name)) for w in wants) else "disabled"


def do_is_enabled(names: list[str], opts: Options) -> int:
    rc = 1
    for name in names:
        value = enabled_state(name)
        if not opts.quiet:
            print(value)
        if value in ("enabled", "static"):
            rc = 0
    return rc


def do_kill(names: list[str], opts: Options) -> int:
    sig = int(opts.signal) if opts.signal.isdigit() else getattr(signal, opts.signal, signal.SIGTERM)
    for name in names:
        state = st.read_state(name)
        main_pid = int(state["main_pid"])
        if not main_pid:
            continue
        with contextlib.suppress(ProcessLookupError):
            if opts.kill_whom == "main":
                os.kill(main_pid, sig)
            else:
                os.killpg(main_pid, sig)
                for pid in _descendants(main_pid):
                    os.kill(pid, sig)
    return 0


def do_cat(names: list[str]) -> int:
    rc = 0
    first = True
    for name in names:
        definition = st.get_loaded(name)
        if definition["load_state"] == "not-found":
            err(f"No files found for {name}.")
            rc = 1
            continue
        if not first:
            print()
        first = False
        if st.need_daemon_reload(definition):
            print(
                f"# Warning: {name} changed on disk, the version systemd has loaded is outdated.\n"
                "# This output shows the current version of the unit's original fragment and drop-in files.\n"
                "# If fragments or drop-ins were added or removed, they are not properly reflected in this "
                "output.\n# Run 'systemctl daemon-reload' to reload units."
            )
        for index, path in enumerate([definition["fragment"], *definition["dropins"]]):
            if index:
                print()
            print(f"# {path}")
            try:
                with open(path) as f:
                    sys.stdout.write(f.read())
            except OSError as exc:
                err(f'Failed to read "{path}": {exc.strerror}')
    return rc


def do_list_units(patterns: list[str], opts: Options) -> int:
    import fnmatch

    if opts.types and "service" not in opts.types:
        names: list[str] = []
    else:
        names = sorted(set(st.loaded_names()) | set(_state_names()))
    rows = []
    for name in names:
        if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
            continue
        definition = st.get_loaded(name)
        state = st.read_state(name)
        active = str(state["active_state"])
        if opts.states and active not in opts.states and state["sub_state"] not in opts.states:
            continue
        if not opts.all and not opts.states and active == "inactive":
            continue
        rows.append(
            (
                name,
                str(definition["load_state"]),
                active,
                str(state["sub_state"]),
                str(definition.get("description") or name),
                active == "failed",
            )
        )
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(("UNIT", "LOAD", "ACTIVE", "SUB"))]
    circle = not opts.plain

    def line(cols: tuple[str, ...], failed: bool = False) -> str:
        lead = ("\u25cf " if failed else "  ") if circle else ""
        return (lead + " ".join(c.ljust(w) for c, w in zip(cols[:4], widths, strict=True)) + " " + cols[4]).rstrip()

    if not opts.no_legend:
        print(line(("UNIT", "LOAD", "ACTIVE", "SUB", "DESCRIPTION")))
    for row in rows:
        print(line(row[:5], row[5]))
    if not opts.no_legend:
        print(
            "\nLOAD   = Reflects whether the unit definition was properly loaded.\n"
            "ACTIVE = The high-level unit activation state, i.e. generalization of SUB.\n"
            "SUB    = The low-level unit activation state, values depend on unit type."
        )
        tail = "" if opts.all else " Pass --all to see loaded but inactive units, too."
        print(f"{len(rows)} loaded units listed.{tail}")
        print("To show all installed unit files use 'systemctl list-unit-files'.")
    return 0


def main(argv: list[str]) -> int:
    from fakesystemd import show

    os.makedirs(st.STATE_DIR, exist_ok=True)
    with contextlib.suppress(OSError):
        st.audit(argv)
    try:
        verb, args, opts = parse_args(argv[1:])
    except Usage as exc:
        err(f"systemctl: {exc}")
        return 1
    names = [unitfile.normalize(a) for a in args]
    simple = {
        "start": do_start,
        "stop": do_stop,
        "restart": do_restart,
        "try-restart": do_try_restart,
        "condrestart": do_try_restart,
        "reload-or-restart": do_restart,
        "reload": do_reload,
    }
    if verb in simple:
        if not names:
            err("Too few arguments.")
            return 1
        rc = 0
        for name in names:
            rc = simple[verb](name, opts) or rc
        return rc
    if verb in ("enable", "disable"):
        return max([do_enable(n, opts, verb == "enable") for n in names] or [0])
    if verb in ("daemon-reload", "daemon-reexec"):
        return do_daemon_reload()
    if verb == "reset-failed":
        return do_reset_failed(names)
    if verb == "is-active":
        return do_is_active(names, opts)
    if verb == "is-failed":
        return do_is_failed(names, opts)
    if verb == "is-enabled":
        return do_is_enabled(names, opts)
    if verb == "kill":
        return do_kill(names, opts)
    if verb == "cat":
        return do_cat(names)
    if verb == "show":
        return show.do_show(names, opts)
    if verb == "status":
        return show.do_status(names, opts)
    if verb == "list-units":
        return do_list_units(args, opts)
    err(f"Unknown command verb {verb}.")
    return 1
