"""The per-unit supervisor: plays PID 1's part for one service (exec, journal, Restart=, stop)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

from fakesystemd import state as st
from fakesystemd import unit as unitfile

SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLEAN_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}
_VAR_WORD = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_VAR_BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\$")


def build_environment(definition: dict, invocation: str) -> dict[str, str]:
    """systemd's service environment: a fixed PATH, Environment=, then EnvironmentFile= (files win)."""
    env = {"PATH": SERVICE_PATH, "INVOCATION_ID": invocation}
    user = definition.get("user")
    if user:
        import pwd

        pw = pwd.getpwnam(user)
        env.update(HOME=pw.pw_dir, USER=user, LOGNAME=user, SHELL=pw.pw_shell)
    for assignment in definition["environment"]:
        key, _, value = assignment.partition("=")
        env[key] = value
    for item in definition["environment_files"]:
        try:
            with open(item["path"], encoding="utf-8", errors="replace") as f:
                env.update(unitfile.parse_env_file(f.read()))
        except OSError as exc:
            if not item["optional"]:
                raise FileNotFoundError(f"Failed to load environment files: {exc.strerror}") from exc
    return env


def expand_argv(command: dict, env: dict[str, str]) -> list[str]:
    """$VAR as a whole word splits at whitespace; ${VAR} is one word; $$ is '$'; ':' disables."""
    argv: list[str] = list(command["argv"])
    if ":" in command["flags"]:
        return argv
    out: list[str] = []
    for word in argv:
        m = _VAR_WORD.match(word)
        if m:
            out.extend(env.get(m.group(1), "").split())
        else:
            out.append(_VAR_BRACED.sub(lambda m: env.get(m.group(1), "") if m.group(1) else "$", word))
    return out


def resolve(path: str) -> str:
    if os.path.isabs(path):
        return path
    return shutil.which(path, path=SERVICE_PATH) or path


class Supervisor:
    def __init__(self, name: str, ready_fd: int) -> None:
        self.name = name
        self.ready_fd = ready_fd
        self.definition = st.get_loaded(name)
        self.desc = str(self.definition.get("description") or name)
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.timed_out = False
        self.pump: threading.Thread | None = None

    # -- signals -----------------------------------------------------------------------------------
    def on_term(self, _sig: int, _frame: object) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            sig = getattr(signal, str(self.definition.get("kill_signal") or "SIGTERM"), signal.SIGTERM)
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)
            timeout = float(self.definition.get("timeout_stop_sec") or 90.0)
            if timeout != float("inf"):
                signal.setitimer(signal.ITIMER_REAL, max(timeout, 0.001))

    def on_alarm(self, _sig: int, _frame: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.timed_out = True
        st.journal(self.name, f"{self.name}: State 'stop-sigterm' timed out. Killing.")
        comm = _comm(self.proc.pid)
        st.journal(self.name, f"{self.name}: Killing process {self.proc.pid} ({comm}) with signal SIGKILL.")
        self._kill_all(signal.SIGKILL)

    def _kill_all(self, sig: int) -> None:
        """Emulate KillMode=control-group: the main process group and every descendant."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def _ready(self, message: str) -> None:
        if self.ready_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self.ready_fd, message.encode())
                os.close(self.ready_fd)
            self.ready_fd = -1

    # -- the service's life ----------------------------------------------------------------------------
    def spawn(self) -> str:
        """Start the main process; returns '' or a failure result ('resources', 'exit-code')."""
        invocation = uuid.uuid4().hex
        command = self.definition["exec_start"][0]
        try:
            env = build_environment(self.definition, invocation)
        except FileNotFoundError as exc:
            st.journal(self.name, f"{self.name}: {exc}", priority=3)
            st.journal(self.name, f"{self.name}: Failed to spawn 'start' task: No such file or directory")
            return "resources"
        argv = expand_argv(command, env)
        path = resolve(command["path"])
        user = self.definition.get("user") or None
        group = self.definition.get("group") or None
        cwd = self.definition.get("working_directory") or ("~" if user else "/")
        if cwd.startswith("-"):
            cwd = cwd[1:] if os.path.isdir(cwd[1:]) else "/"
        if cwd == "~":
            cwd = env.get("HOME", "/")
        try:
            self.proc = subprocess.Popen(
                argv,
                executable=path,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=user,
                group=group,
                extra_groups=[] if user else None,
            )
        except OSError as exc:
            st.journal(self.name, f"{self.name}: Failed to locate executable {path}: {exc.strerror}", priority=3)
            st.journal(self.name, f"{self.name}: Failed at step EXEC spawning {path}: {exc.strerror}", priority=3)
            st.update_state(
                self.name,
                exec_main_code="exited",
                exec_main_status=203,
                invocation_id=invocation,
                exec_main_start=time.time(),
                exec_main_exit=time.time(),
            )
            st.journal(self.name, f"{self.name}: Main process exited, {st.describe_exit('exited', 203)}", priority=5)
            return "exit-code"
        now = time.time()
        st.update_state(
            self.name,
            active_state="active",
            sub_state="running",
            result="success",
            main_pid=self.proc.pid,
            supervisor_pid=os.getpid(),
            invocation_id=invocation,
            exec_main_start=now,
            exec_main_pid=self.proc.pid,
            exec_main_exit=0.0,
            exec_main_code="",
            exec_main_status=0,
            active_enter=now,
            argv=argv,
            path=path,
        )
        st.journal(self.name, f"Started {self.name} - {self.desc}.", invocation=invocation)
        ident = self.definition.get("syslog_identifier") or os.path.basename(argv[0] if argv else path)
        self.pump = threading.Thread(target=self._pump, args=(self.proc, ident, invocation), daemon=True)
        self.pump.start()
        return ""

    def _pump(self, proc: subprocess.Popen[bytes], ident: str, invocation: str) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            st.journal(self.name, line, ident=ident, pid=proc.pid, invocation=invocation)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGALRM, self.on_alarm)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _become_subreaper()
        while True:
            failure = self.spawn()
            if self.stopping and self.proc is not None:  # a stop raced the spawn
                self._kill_all(signal.SIGTERM)
            self._ready("ok" if not failure or failure == "exit-code" else f"fail:{failure}")
            if failure == "resources":
                st.journal(self.name, f"{self.name}: Failed with result 'resources'.", priority=4)
                st.update_state(
                    self.name,
                    active_state="failed",
                    sub_state="failed",
                    result="resources",
                    main_pid=0,
                    supervisor_pid=0,
                    inactive_enter=time.time(),
                )
                st.journal(self.name, f"Failed to start {self.name} - {self.desc}.", priority=3)
                return 0
            if failure:
                code, status = "exited", 203
            else:
                assert self.proc is not None
                rc = self.proc.wait()
                signal.setitimer(signal.ITIMER_REAL, 0)
                if self.pump is not None:  # the output comes before "Main process exited", as in systemd
                    self.pump.join(timeout=0.5)
                code, status = ("killed", -rc) if rc < 0 else ("exited", rc)
            clean = self._is_clean(code, status)
            result = "success" if clean else ("signal" if code == "killed" else "exit-code")
            if self.timed_out:
                result = "timeout"
            st.update_state(
                self.name, exec_main_exit=time.time(), exec_main_code=code, exec_main_status=status, main_pid=0
            )
            if not clean or self.timed_out:
                st.journal(self.name, f"{self.name}: Main process exited, {st.describe_exit(code, status)}", priority=5)
            self._kill_all(signal.SIGKILL)
            _reap()
            if result == "success":
                st.journal(self.name, f"{self.name}: Deactivated successfully.")
            else:
                st.journal(self.name, f"{self.name}: Failed with result '{result}'.", priority=4)
            if self.stopping:
                self._finish(result)
                st.journal(self.name, f"Stopped {self.name} - {self.desc}.")
                return 0
            if not self._should_restart(code, clean):
                self._finish(result)
                return 0
            if not self._restart_wait(result):
                return 0
            if not self._restart_allowed():
                return 0

    def _is_clean(self, code: str, status: int) -> bool:
        if code == "killed":
            return status in CLEAN_SIGNALS and not self.timed_out
        ignore = "-" in self.definition["exec_start"][0]["flags"]
        return status == 0 or ignore or str(status) in self.definition.get("success_exit_status", [])

    def _should_restart(self, code: str, clean: bool) -> bool:
        policy = self.definition.get("restart", "no")
        if policy == "always":
            return True
        if policy == "on-failure":
            return not clean
        if policy == "on-abnormal":
            return code == "killed" and not clean or self.timed_out
        if policy == "on-abort":
            return code == "killed" and not clean
        if policy == "on-success":
            return clean
        return False

    def _finish(self, result: str) -> None:
        active = "inactive" if result == "success" else "failed"
        st.update_state(
            self.name,
            active_state=active,
            sub_state="dead" if active == "inactive" else "failed",
            result=result,
            main_pid=0,
            supervisor_pid=0,
            inactive_enter=time.time(),
        )

    def _restart_wait(self, result: str) -> bool:
        st.update_state(self.name, active_state="activating", sub_state="auto-restart", result=result)
        deadline = time.monotonic() + float(self.definition.get("restart_sec", 0.1))
        while time.monotonic() < deadline:
            if self.stopping:
                self._finish(result)
                st.journal(self.name, f"Stopped {self.name} - {self.desc}.")
                return False
            time.sleep(min(0.02, max(deadline - time.monotonic(), 0)))
        with st.locked(self.name):
            state = st.read_state(self.name)
            state["n_restarts"] = int(state["n_restarts"]) + 1
            st.write_state(self.name, state)
        st.journal(self.name, f"{self.name}: Scheduled restart job, restart counter is at {state['n_restarts']}.")
        st.journal(self.name, f"Stopped {self.name} - {self.desc}.")
        return not self.stopping

    def _restart_allowed(self) -> bool:
        if ratelimit_hit(self.name, self.definition):
            start_limit_hit(self.name, self.desc)
            return False
        return True


def ratelimit_hit(name: str, definition: dict) -> bool:
    """systemd's ratelimit_below() over StartLimitIntervalSec=/StartLimitBurst= (counts every start)."""
    interval = float(definition.get("start_limit_interval", 10.0))
    burst = int(definition.get("start_limit_burst", 5))
    with st.locked(name):
        state = st.read_state(name)
        if interval <= 0 or burst <= 0:
            return False
        now = time.time()
        begin = float(state["ratelimit_begin"])
        if not begin or now - begin > interval:
            state["ratelimit_begin"], state["ratelimit_num"] = now, 0
        hit = int(state["ratelimit_num"]) >= burst
        if not hit:
            state["ratelimit_num"] = int(state["ratelimit_num"]) + 1
        st.write_state(name, state)
        return hit


def start_limit_hit(name: str, desc: str) -> None:
    st.journal(name, f"{name}: Start request repeated too quickly.", priority=4)
    st.journal(name, f"{name}: Failed with result 'start-limit-hit'.", priority=4)
    st.update_state(
        name,
        active_state="failed",
        sub_state="failed",
        result="start-limit-hit",
        main_pid=0,
        supervisor_pid=0,
        inactive_enter=time.time(),
    )
    st.journal(name, f"Failed to start {name} - {desc}.", priority=3)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "n/a"


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                found.append(pid)
                frontier.append(pid)
    return found


def _become_subreaper() -> None:
    """Orphans of the service re-parent to us (like a cgroup keeps them in the unit)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def main(argv: list[str]) -> int:
    name, ready_fd = argv[1], int(argv[2])
    return Supervisor(name, ready_fd).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
