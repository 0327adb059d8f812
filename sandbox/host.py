"""Sandbox GPU hosts on real systemd: ``systemd-nspawn --boot`` of one cached Debian image, one per loopback address.

Each host is ``unshare --mount`` (a private mount namespace holding the host's overlay: the image below, the
host's own upper directory above) → ``systemd-nspawn --register=no --keep-unit --boot`` in the machine's
network namespace, in cgroups of its own (``sandbox/cgroups.py``). sshd listens on the host's own loopback
address only (checked with ``sshd -T`` before the host counts as up). Stop = SIGKILL of every process in the
host's cgroups, by PID; nothing else to undo (the overlay lives in the dying mount namespace).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import ipaddress
import itertools
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from sandbox import cgroups, image, overlay, rootfs

INSIDE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AUDIT_LOG = image.AUDIT_LOG
STANDIN_KNOBS = image.STANDIN_KNOBS
INOTIFY_INSTANCES = 8192  # every container's systemd/logind/journald counts against the machine's root


class SandboxError(RuntimeError):
    """A sandbox host could not be built, started or reset."""


def _ssh_keygen(path: Path, comment: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _pids_in_ns(ns: str) -> list[int]:
    """Live (not zombie) processes of a PID namespace."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _pid_ns(int(entry)) == ns and not _zombie(int(entry)):
            pids.append(int(entry))
    return pids


def address_free(address: str, port: int = 22) -> bool:
    """Nobody listens on address:port (a bind test; another sandbox may hold the address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "in use" (sshd sets it too)
        try:
            sock.bind((address, port))
        except OSError as exc:
            return exc.errno != errno.EADDRINUSE
    return True


def free_address_block(n_hosts: int, second_octet: int = 42) -> str:
    """First of n consecutive free loopback addresses 127.<second>.X.10… (one block per concurrent session)."""
    for third in range(250):
        first = ipaddress.IPv4Address(f"127.{second_octet}.{third}.10")
        if all(address_free(str(first + i)) for i in range(n_hosts)):
            return str(first)
    raise SandboxError("no free block of loopback addresses for sandbox hosts")


def _listener_inodes(address: str, port: int) -> list[str]:
    """Socket inodes listening on address:port, from /proc/net/tcp."""
    packed = socket.inet_aton(address)[::-1].hex().upper() + f":{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    return [f[9] for f in (line.split() for line in lines) if f[1] == packed and f[3] == "0A"]


def _owns_socket(pid: int, inode: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                return True
        except OSError:
            continue
    return False


def _memory_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _raise_inotify_limit() -> None:
    knob = Path("/proc/sys/fs/inotify/max_user_instances")
    try:
        if int(knob.read_text()) < INOTIFY_INSTANCES:
            knob.write_text(str(INOTIFY_INSTANCES))
    except OSError:
        pass


_MACHINE_SERIAL = itertools.count()


class SandboxHost:
    """One sandbox host: a booted systemd 252 in an nspawn container."""

    def __init__(self, sandbox: Sandbox, name: str, address: str, port: int = 22) -> None:
        self.sandbox = sandbox
        self.name = name
        self.address = address
        self.port = port
        self.dir = sandbox.workdir / "hosts" / name
        self.upper = self.dir / "upper"
        self.pristine = self.dir / "pristine"
        self.root_mount = self.dir / "root"
        self.host_key = self.dir / "ssh_host_ed25519_key"
        # Unique per host object, not per process name: two fleets of one test run may both have a `gpu-0`
        # (a fleet that fails to start stops its hosts by cgroup: it must never reach another fleet's).
        self.machine = f"sbx-{os.getpid()}-{next(_MACHINE_SERIAL)}-{name}"[:64]
        self.cgroup = cgroups.group_name(self.machine)
        self.machine_id = ""
        self.pid = 0  # the container's PID 1 (systemd), as seen from the machine
        self.pid_ns: str | None = None
        self.journal_cursor: str | None = None
        self.base_units: set[str] = set()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:
        return f"<SandboxHost {self.name} {self.address} pid={self.pid}>"

    # -- files -------------------------------------------------------------------------------------
    def path(self, inside: str) -> Path:
        """The machine path of ``inside`` as the host sees it (through /proc/PID/root, overlay included).

        Absolute symlinks met on the way resolve against the machine's root, not the host's."""
        if not inside.startswith("/"):
            raise ValueError(f"not an absolute path: {inside!r}")
        if not self.pid:
            raise SandboxError(f"{self.name} is not running")
        return Path(f"/proc/{self.pid}/root") / os.path.normpath(inside).lstrip("/")

    def is_private(self, inside: str) -> bool:
        """Whether ``inside`` is the host's own (writable) file: all but the read-only stand-in bind."""
        norm = os.path.normpath(inside)
        return not (norm == image.STANDIN_INSIDE or norm.startswith(image.STANDIN_INSIDE + "/"))

    def write(self, inside: str, text: str, mode: int = 0o644) -> None:
        if not self.is_private(inside):
            raise PermissionError(f"{inside} is on the read-only part of {self.name}")
        target = self.path(inside)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        os.chmod(target, mode)

    def read(self, inside: str) -> str:
        return self.path(inside).read_text()

    # -- processes ---------------------------------------------------------------------------------
    def build(self, client_pubkey: str) -> None:
        for path in (self.upper, self.pristine, self.dir / "work"):
            if path.exists():
                shutil.rmtree(path)
        self.upper.mkdir(parents=True)
        (self.dir / "work").mkdir()
        self.root_mount.mkdir(exist_ok=True)
        self.machine_id = image.build_upper(
            self.upper,
            name=self.name,
            address=self.address,
            port=self.port,
            host_key=self.host_key,
            client_pubkey=client_pubkey,
        )

    def boot_options(self) -> list[str]:
        """How nspawn starts the host: ``--boot`` (the image's systemd as PID 1)."""
        return ["--boot"]

    def payload(self) -> list[str]:
        """The command nspawn runs (none with ``--boot``: systemd's own init)."""
        return []

    def _launch_script(self, img: Path) -> str:
        q = shlex.quote
        moves = "".join(f"echo $$ > {q(str(d / 'cgroup.procs'))}\n" for d in cgroups.prepare(self.cgroup))
        options = f"lowerdir={img},upperdir={self.upper},workdir={self.dir / 'work'}"
        nspawn = [
            "systemd-nspawn",
            "--quiet",
            "--register=no",
            "--keep-unit",
            *self.boot_options(),
            "--settings=no",
            f"--directory={self.root_mount}",
            f"--machine={self.machine}",
            f"--hostname={self.name}",
            f"--uuid={self.machine_id}",
            "--link-journal=no",
            "--resolv-conf=off",
            "--timezone=off",
            "--console=read-only",
            f"--bind-ro={image.STANDIN}:{image.STANDIN_INSIDE}",
            *self.payload(),
        ]
        return (
            "set -eu\n"
            + moves
            + f"mount -t overlay overlay -o {q(options)} {q(str(self.root_mount))}\n"
            + "exec "
            + shlex.join(nspawn)
            + "\n"
        )

    def launch(self, img: Path) -> None:
        if not address_free(self.address, self.port):
            raise SandboxError(f"{self.name}: {self.address}:{self.port} is already in use (another sandbox?)")
        script = self.dir / "launch.sh"
        script.write_text(self._launch_script(img))
        self._log = open(self.dir / "console.log", "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "/bin/sh", str(script)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, deadline: float) -> None:
        """Poll until sshd answers on the host's address and systemd is up; refuse any other sshd listener."""
        assert self._proc is not None
        while True:
            if self._proc.poll() is not None:
                raise SandboxError(f"{self.name}: nspawn exited ({self._proc.returncode}): {self.log_tail()}")
            if not self.pid:
                kids = _children(self._proc.pid)
                if kids and _pid_ns(kids[0]) != _pid_ns(self._proc.pid):
                    self.pid = kids[0]
                    self.pid_ns = _pid_ns(self.pid)
            if self.pid and self._banner() and self._listener_is_ours():
                break
            if time.monotonic() > deadline:
                raise SandboxError(f"{self.name}: sshd not ready in time: {self.log_tail()}")
            time.sleep(0.01)
        self.settle(max(1.0, deadline - time.monotonic()))
        self._check_sshd()
        self.base_units = set(self._unit_names())
        self.journal_cursor = self._cursor()
        overlay.snapshot(self.upper, self.pristine)

    def settle(self, left: float) -> None:
        """Wait for systemd to finish booting (``is-system-running --wait``); anything but running fails."""
        state = self.run("systemctl", "is-system-running", "--wait", timeout=left).stdout.strip()
        if state != "running":
            failed = self.run("systemctl", "list-units", "--failed", "--plain", "--no-legend").stdout
            raise SandboxError(f"{self.name}: systemd is {state!r}, failed units: {failed.strip()}")

    def _check_sshd(self) -> None:
        listen = [
            line.split()[1]
            for line in self.run("sshd", "-T", check=True).stdout.splitlines()
            if line.startswith("listenaddress ")
        ]
        if listen != [f"{self.address}:{self.port}"]:
            raise SandboxError(f"{self.name}: sshd would listen on {listen}, not only {self.address}:{self.port}")

    def _banner(self) -> bool:
        try:
            with socket.create_connection((self.address, self.port), timeout=0.5) as sock:
                return sock.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    def _listener_is_ours(self) -> bool:
        mine = set(self.processes())
        return any(_owns_socket(p, inode) for inode in _listener_inodes(self.address, self.port) for p in mine)

    def log_tail(self) -> str:
        try:
            return (self.dir / "console.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def processes(self) -> list[int]:
        """Every process inside this host's PID namespace (machine PIDs)."""
        return _pids_in_ns(self.pid_ns) if self.pid_ns else []

    def all_processes(self) -> list[int]:
        """The host's processes plus its launcher and nspawn (everything stop() kills)."""
        own = [self._proc.pid] if self._proc is not None and self._proc.poll() is None else []
        return sorted(set(own + cgroups.pids(self.cgroup) + self.processes()))

    def rss_kib(self) -> int:
        return sum(_memory_kib(p, "Rss") for p in self.all_processes())

    def pss_kib(self) -> int:
        return sum(_memory_kib(p, "Pss") for p in self.all_processes())

    def stop(self) -> None:
        """SIGKILL everything of the host by PID (cgroups, PID namespace), remove its cgroups. Idempotent."""
        for pid in self.processes():  # `run()` sessions live in the namespace but not in the cgroups
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.pid and self._proc is not None:  # PID 1 first: nspawn reaps it and exits on its own
            try:
                os.kill(self.pid, signal.SIGKILL)
                self._proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        survivors = cgroups.kill_and_remove(self.cgroup)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.005)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._proc = None
        self.pid = 0
        if survivors:
            raise SandboxError(f"{self.name}: processes survive SIGKILL: {survivors}")

    def run(
        self, *argv: str, check: bool = False, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the host as root (setup and checks; not audited, not over SSH)."""
        if not self.pid:
            raise SandboxError(f"{self.name} is not running")
        env = {
            "PATH": INSIDE_PATH,
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "USER": "root",
            "LOGNAME": "root",
            "SANDBOX_NO_AUDIT": "1",
        }
        cmd = ["nsenter", "-t", str(self.pid), "-m", "-u", "-i", "-p", "-r", "-w", "--", "/usr/bin/env", "-i"]
        cmd += [f"{k}={v}" for k, v in env.items()] + list(argv)
        return subprocess.run(cmd, capture_output=True, text=True, check=check, input=input, timeout=timeout)

    def sh(self, script: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run("/bin/sh", "-c", script, check=check)

    # -- systemd helpers ---------------------------------------------------------------------------
    def systemctl(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", *args, check=check)

    def install_unit(self, name: str, text: str, *, start: bool = True) -> None:
        """Write /etc/systemd/system/NAME, daemon-reload and (by default) start it (not audited)."""
        if "." not in name:
            name += ".service"
        self.write(f"/etc/systemd/system/{name}", text)
        self.systemctl("daemon-reload", check=True)
        if start:
            result = self.systemctl("start", name)
            if result.returncode != 0:
                raise SandboxError(f"{self.name}: start {name} failed: {result.stderr.strip()}")

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", unit, *(f"--property={p}" for p in props), check=True).stdout
        values: dict[str, str] = {}
        for line in out.splitlines():
            key, _, value = line.partition("=")
            values[key] = value if key not in values else values[key] + "\n" + value
        return values

    def audit_entries(self) -> list[dict[str, object]]:
        """Each systemctl call received over SSH: ``{"uid": int, "user": str, "argv": [...]}`` in order."""
        try:
            text = self.read(AUDIT_LOG)
        except FileNotFoundError:
            return []
        entries: list[dict[str, object]] = []
        for line in text.splitlines():
            if line.strip():
                uid, user, *argv = shlex.split(line)
                entries.append({"uid": int(uid), "user": user, "argv": argv})
        return entries

    def audit(self) -> list[str]:
        """systemctl command lines this host received over SSH, in order (without the program name)."""
        return [shlex.join(e["argv"]) for e in self.audit_entries()]  # type: ignore[arg-type]

    def _cursor(self) -> str | None:
        out = self.run("journalctl", "--quiet", "--no-pager", "-n", "1", "-o", "export").stdout
        for line in out.splitlines():
            if line.startswith("__CURSOR="):
                return line.split("=", 1)[1]
        return None

    def journal(self, unit: str) -> list[str]:
        """Messages of ``unit`` (its own and systemd's about it) since the last reset, from journalctl."""
        if not unit.endswith((".service", ".target", ".socket", ".timer", ".scope")):
            unit += ".service"
        argv = ["journalctl", "--quiet", "--no-pager", "-o", "cat", "-u", unit]
        if self.journal_cursor:
            argv.append(f"--after-cursor={self.journal_cursor}")
        return self.run(*argv, check=True).stdout.splitlines()

    def set_standin(self, **knobs: object) -> None:
        import json

        self.write(STANDIN_KNOBS, json.dumps(knobs, indent=2) + "\n")

    def _unit_names(self) -> list[str]:
        out = self.run("systemctl", "list-units", "--all", "--plain", "--no-legend", "--full").stdout
        return [line.split()[0] for line in out.splitlines() if line.split()]

    def kill_services(self) -> None:
        """Stop (SIGKILL first) every unit that was not there at boot, and kill strays of ``run()``."""
        extra = sorted(
            u for u in self._unit_names() if u not in self.base_units and not u.endswith((".mount", ".device"))
        )
        if extra:
            self.run("systemctl", "kill", "--signal=SIGKILL", *extra)
            self.run("systemctl", "stop", *extra)
        units = set(cgroups.pids(self.cgroup))
        deadline = time.monotonic() + 10
        while True:
            strays = [p for p in self.processes() if p not in units and p != self.pid]
            if not strays:
                return
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise SandboxError(f"{self.name}: processes survive: {strays}")
            time.sleep(0.005)

    def reset(self) -> None:
        """Stop the tests' units; restore the files changed since boot; empty /tmp, remediate's locks and the audit log;
        daemon-reload, reset-failed; journal() from here on shows only new lines."""
        self.kill_services()
        overlay.restore(self.upper, self.pristine, self.sandbox.image, self.path("/"))
        script = (
            "find /tmp /var/tmp -mindepth 1 -maxdepth 1 ! -name 'systemd-private-*' -exec rm -rf {} +; "
            "rm -rf /run/lock/remediate-* /run/remediate; "  # locks of earlier tests (/run is a tmpfs, not the overlay)
            # the journal of earlier tests: remediate reads a unit's whole journal (diagnose, plan), a test sees its own
            "journalctl --rotate >/dev/null 2>&1; journalctl --vacuum-files=1 >/dev/null 2>&1; "
            f": > {AUDIT_LOG}; systemctl daemon-reload && systemctl reset-failed"
        )
        done = self.run("/bin/sh", "-c", script)
        if done.returncode != 0:
            raise SandboxError(f"{self.name}: reset failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
        self.journal_cursor = self._cursor()


_live: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def _stop_all() -> None:
    for sandbox in list(_live):
        try:
            sandbox.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _on_signal(signum: int, _frame: object) -> None:
    _stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_exit_hooks() -> None:
    if getattr(_install_exit_hooks, "done", False):
        return
    atexit.register(_stop_all)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, _on_signal)
        except ValueError:  # not the main thread
            pass
    _install_exit_hooks.done = True  # type: ignore[attr-defined]


class Sandbox:
    """N sandbox hosts sharing one client key, known_hosts and ssh_config. A context manager."""

    def __init__(
        self,
        workdir: Path,
        n_hosts: int,
        *,
        first_address: str = "127.42.0.10",
        name_prefix: str = "gpu-",
        host_class: type[SandboxHost] = SandboxHost,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        first = ipaddress.IPv4Address(first_address)
        self.hosts = [host_class(self, f"{name_prefix}{i}", str(first + i)) for i in range(n_hosts)]
        self.identity = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.ssh_config = self.workdir / "ssh_config"
        self.image = rootfs.image_dir()
        self.started = False

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def host(self, name: str) -> SandboxHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @staticmethod
    def unavailable_reason() -> str | None:
        """Why sandbox hosts cannot run here (None when they can)."""
        if os.geteuid() != 0:
            return "sandbox hosts need root (nspawn, mounts, sshd on port 22)"
        for tool in ("systemd-nspawn", "nsenter", "unshare", "ssh-keygen", "ssh"):
            if not shutil.which(tool):
                return f"missing {tool} (run sandbox/system-deps.sh)"
        if not rootfs.is_built() and not shutil.which("mmdebstrap"):
            return "no sandbox image and no mmdebstrap to build one (run sandbox/system-deps.sh)"
        if not cgroups.hierarchies():
            return "no cgroup hierarchy for systemd-nspawn under /sys/fs/cgroup"
        return None

    def start(self, timeout: float = 60) -> None:
        reason = self.unavailable_reason()
        if reason:
            raise SandboxError(reason)
        cgroups.sweep_dead()
        self.image = rootfs.build(quiet=True)
        _raise_inotify_limit()
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o700)
        keygens = []
        if not self.identity.exists():
            keygens.append(_ssh_keygen(self.identity, "sandbox-client"))
        for host in self.hosts:
            host.dir.mkdir(parents=True, exist_ok=True)
            if not host.host_key.exists():
                keygens.append(_ssh_keygen(host.host_key, f"root@{host.name}"))
        for proc in keygens:
            if proc.wait() != 0:
                raise SandboxError("ssh-keygen failed")
        pubkey = self.identity.with_suffix(".pub").read_text()
        for host in self.hosts:
            host.build(pubkey)
        self._write_client_files()
        _install_exit_hooks()
        _live.add(self)
        self.started = True
        # Concurrent sessions on this machine: check-and-bind of the addresses happens under one lock.
        with open(os.path.join(tempfile.gettempdir(), ".remediate-sandbox-addresses.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                for host in self.hosts:
                    host.launch(self.image)
                deadline = time.monotonic() + timeout
                while not all(h._banner() for h in self.hosts) and time.monotonic() < deadline:
                    time.sleep(0.02)  # the addresses are taken: the lock can go before systemd settles
            except BaseException:
                self.stop()
                raise
        try:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda h: h.wait_ready(deadline), self.hosts))
        except BaseException:
            self.stop()
            raise

    def _write_client_files(self) -> None:
        known, config = [], []
        for host in self.hosts:
            key = " ".join(host.host_key.with_suffix(".pub").read_text().split()[:2])
            known.append(f"{host.address} {key}" if host.port == 22 else f"[{host.address}]:{host.port} {key}")
            config.append(
                f"Host {host.name}\n"
                f"    HostName {host.address}\n"
                f"    Port {host.port}\n"
                f"    User root\n"
                f"    IdentityFile {self.identity}\n"
                f"    IdentitiesOnly yes\n"
                f"    UserKnownHostsFile {self.known_hosts}\n"
                f"    GlobalKnownHostsFile /dev/null\n"
                f"    StrictHostKeyChecking yes\n"
                f"    BatchMode yes\n"
                f"    LogLevel ERROR\n"
            )
        self.known_hosts.write_text("\n".join(known) + "\n")
        self.ssh_config.write_text("\n".join(config))

    def stop(self) -> None:
        errors = []
        for host in self.hosts:
            try:
                host.stop()
            except SandboxError as exc:
                errors.append(str(exc))
        self.started = False
        _live.discard(self)
        if errors:
            raise SandboxError("; ".join(errors))

    def processes(self) -> list[int]:
        """Every live process this sandbox started (launchers, nspawn and everything inside the hosts)."""
        return sorted(p for host in self.hosts for p in host.all_processes())

    def rss_kib(self) -> int:
        return sum(host.rss_kib() for host in self.hosts)

    def pss_kib(self) -> int:
        return sum(host.pss_kib() for host in self.hosts)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no host has an SSH session left (the readiness probes' connections are gone)."""
        deadline = time.monotonic() + timeout
        while any(_sessions(host) for host in self.hosts):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True


def _sessions(host: SandboxHost) -> list[int]:
    """sshd processes of a host other than its listener (one per connection being served)."""
    found = []
    for pid in host.processes():
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd" and "sshd: " in Path(
                f"/proc/{pid}/cmdline"
            ).read_text(errors="replace"):
                found.append(pid)
        except OSError:
            continue
    return found
