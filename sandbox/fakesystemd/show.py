"""`systemctl show` (machine-readable, systemd's property formats) and `systemctl status` (human)."""

from __future__ import annotations

import os
import sys
import time

from fakesystemd import state as st
from fakesystemd.unit import disk_fingerprint

CODE_NUM = {"": 0, "exited": 1, "killed": 2, "dumped": 3}


def timespan(seconds: float) -> str:
    """systemd's format_timespan(): '1min 30s', '100ms', 'infinity'."""
    if seconds == float("inf"):
        return "infinity"
    if seconds == 0:
        return "0"
    parts = []
    usec = round(seconds * 1_000_000)
    for unit, size in (
        ("d", 86400_000_000),
        ("h", 3600_000_000),
        ("min", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1000),
        ("us", 1),
    ):
        if usec >= size:
            parts.append(f"{usec // size}{unit}")
            usec %= size
    return " ".join(parts)


def _exec_struct(definition: dict, state: dict, ex: bool) -> list[str]:
    out = []
    commands = definition.get("exec_start") or []
    for index, command in enumerate(commands):
        ran = index == 0 and bool(state.get("exec_main_start")) and state.get("path")
        argv = " ".join(state["argv"] if ran and state.get("argv") else command["argv"])
        path = state["path"] if ran else command["path"]
        start = st.fmt_timestamp(float(state["exec_main_start"])) if ran else ""
        stop = st.fmt_timestamp(float(state["exec_main_exit"])) if ran else ""
        pid = int(state["exec_main_pid"]) if ran else 0
        code = str(state.get("exec_main_code") or "") if ran else ""
        status = int(state.get("exec_main_status") or 0) if ran else 0
        if code == "exited":
            code_s, status_s = "exited", str(status)
        elif code == "killed":
            code_s, status_s = "killed", f"{status}/{st.SIGNAL_NAMES.get(status, str(status))}"
        else:
            code_s, status_s = "(null)", "0/0"
        if ex:
            flags = " ".join(
                {"-": "ignore-failure", "+": "privileged", "!": "no-setuid", ":": "no-env-expand"}[f]
                for f in command["flags"]
                if f != "@"
            )
            middle = f"flags={flags}"
        else:
            middle = f"ignore_errors={'yes' if '-' in command['flags'] else 'no'}"
        out.append(
            f"{{ path={path} ; argv[]={argv} ; {middle} ; start_time=[{start or 'n/a'}] ; "
            f"stop_time=[{stop or 'n/a'}] ; pid={pid} ; code={code_s} ; status={status_s} }}"
        )
    return out


def _quote_env(assignment: str) -> str:
    return f'"{assignment}"' if any(c.isspace() for c in assignment) or '"' in assignment else assignment


def properties(name: str) -> list[tuple[str, list[str]]]:
    """(property, values) in systemd's D-Bus object order (Service interface first, then Unit)."""
    definition = st.get_loaded(name)
    state = st.read_state(name)
    loaded = definition["load_state"] != "not-found"
    ts = st.fmt_timestamp

    def f(x: object) -> float:
        return float(x or 0)  # type: ignore[arg-type]

    need_reload = loaded and disk_fingerprint(name) != definition.get("fingerprint")
    props: list[tuple[str, list[str]]] = [
        ("Type", [str(definition.get("type", "simple"))]),
        ("Restart", [str(definition.get("restart", "no"))]),
        ("NotifyAccess", ["none"]),
        ("RestartUSec", [timespan(float(definition.get("restart_sec", 0.1)))]),
        ("TimeoutStopUSec", [timespan(float(definition.get("timeout_stop_sec", 90.0)))]),
        ("Result", [str(state["result"])]),
        ("NRestarts", [str(state["n_restarts"])]),
        ("MainPID", [str(state["main_pid"])]),
        ("ExecMainStartTimestamp", [ts(f(state["exec_main_start"]))]),
        ("ExecMainExitTimestamp", [ts(f(state["exec_main_exit"]))]),
        ("ExecMainPID", [str(state["exec_main_pid"])]),
        ("ExecMainCode", [str(CODE_NUM.get(str(state.get("exec_main_code") or ""), 0))]),
        ("ExecMainStatus", [str(state.get("exec_main_status") or 0)]),
        ("ExecStart", _exec_struct(definition, state, ex=False) if loaded else []),
        ("ExecStartEx", _exec_struct(definition, state, ex=True) if loaded else []),
        ("Environment", [" ".join(_quote_env(a) for a in definition.get("environment", []))]),
        (
            "EnvironmentFiles",
            [
                f"{e['path']} (ignore_errors={'yes' if e['optional'] else 'no'})"
                for e in definition.get("environment_files", [])
            ],
        ),
        ("User", [str(definition.get("user", ""))]),
        ("WorkingDirectory", [str(definition.get("working_directory", ""))]),
        ("Id", [name]),
        ("Names", [name]),
        ("Description", [str(definition.get("description") or name)]),
        ("LoadState", [str(definition["load_state"])]),
        ("ActiveState", [str(state["active_state"])]),
        ("SubState", [str(state["sub_state"])]),
        ("FragmentPath", [str(definition.get("fragment", ""))]),
        ("DropInPaths", [" ".join(definition.get("dropins", []))]),
        ("UnitFileState", [_unit_file_state(name, loaded)]),
        ("StateChangeTimestamp", [ts(f(state["state_change"]))]),
        ("ActiveEnterTimestamp", [ts(f(state["active_enter"]))]),
        ("InactiveEnterTimestamp", [ts(f(state["inactive_enter"]))]),
        ("NeedDaemonReload", ["yes" if need_reload else "no"]),
        ("StartLimitIntervalUSec", [timespan(float(definition.get("start_limit_interval", 10.0)))]),
        ("StartLimitBurst", [str(definition.get("start_limit_burst", 5))]),
        ("InvocationID", [str(state["invocation_id"])]),
    ]
    return props


def _unit_file_state(name: str, loaded: bool) -> str:
    if not loaded:
        return ""
    from fakesystemd.systemctl import enabled_state

    return enabled_state(name)


def do_show(names: list[str], opts: object) -> int:
    wanted = list(getattr(opts, "properties", []))
    value_only = bool(getattr(opts, "value", False))
    show_all = bool(getattr(opts, "all", False))
    out = []
    for index, name in enumerate(names or []):
        if index:
            out.append("")
        for prop, values in properties(name):
            if wanted and prop not in wanted:
                continue
            if not values:
                values = (
                    [""]
                    if (wanted or show_all) and prop not in ("ExecStart", "ExecStartEx", "EnvironmentFiles")
                    else []
                )
            for value in values:
                if not wanted and not show_all and value == "":
                    continue
                out.append(value if value_only else f"{prop}={value}")
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    return 0


def _ago(t: float) -> str:
    delta = max(time.time() - t, 0)
    if delta < 1:
        return f"{int(delta * 1000)}ms ago"
    if delta < 60:
        return f"{int(delta)}s ago"
    if delta < 3600:
        return f"{int(delta // 60)}min {int(delta % 60)}s ago"
    return f"{int(delta // 3600)}h {int(delta % 3600 // 60)}min ago"


def do_status(names: list[str], opts: object) -> int:
    from fakesystemd import journalctl
    from fakesystemd.systemctl import warn_changed

    rc = 0
    for index, name in enumerate(names):
        if index:
            print()
        definition = st.get_loaded(name)
        state = st.read_state(name)
        if definition["load_state"] == "not-found" and state["active_state"] == "inactive":
            sys.stderr.write(f"Unit {name} could not be found.\n")
            rc = 4
            continue
        active = str(state["active_state"])
        bullet = (
            "\u25cf"
            if active in ("active", "activating", "deactivating")
            else ("\u00d7" if active == "failed" else "\u25cb")
        )
        print(f"{bullet} {name} - {definition.get('description') or name}")
        if definition["load_state"] == "loaded":
            print(f"     Loaded: loaded ({definition['fragment']}; {_unit_file_state(name, True)}; preset: enabled)")
        else:
            print(f"     Loaded: {definition['load_state']} (Reason: Unit {name} has a bad unit file setting.)")
        dropins = definition.get("dropins", [])
        if dropins:
            dirs: dict[str, list[str]] = {}
            for path in dropins:
                dirs.setdefault(os.path.dirname(path), []).append(os.path.basename(path))
            first = True
            for d, files in dirs.items():
                print(f"    {'Drop-In' if first else '       '}: {d}")
                first = False
                print("             \u2514\u2500" + ", ".join(files))
        since = float(state["state_change"] or 0)
        sub = state["sub_state"]
        result = state["result"]
        detail = f" (Result: {result})" if active == "failed" else f" ({sub})"
        when = f" since {st.fmt_timestamp(since)}; {_ago(since)}" if since else ""
        print(f"     Active: {active}{detail}{when}")
        if int(state["main_pid"]):
            pid = int(state["main_pid"])
            print(f"   Main PID: {pid} ({_comm(pid)})")
        elif state.get("exec_main_code"):
            code, status = str(state["exec_main_code"]), int(state["exec_main_status"] or 0)
            if code == "killed":
                text = f"code=killed, signal={st.SIGNAL_NAMES.get(status, status)}"
            else:
                text = st.describe_exit(code, status)
            path = definition["exec_start"][0]["path"] if definition.get("exec_start") else ""
            print(f"    Process: {state['exec_main_pid']} ExecStart={path} ({text})")
        if int(state["main_pid"]):
            print(f"     CGroup: /system.slice/{name}")
            print(f"             \u2514\u2500{state['main_pid']} {' '.join(state.get('argv') or [])}")
        lines = journalctl.render(journalctl.entries([name]), "short")[-max(getattr(opts, "lines", 10), 0) :]
        if lines and getattr(opts, "lines", 10):
            print()
            for line in lines:
                print(line)
        warn_changed(definition)
        if active not in ("active", "reloading"):
            rc = 3
    return rc


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "n/a"
