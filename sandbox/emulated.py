"""Sandbox GPU hosts: real OpenSSH sshd as PID 1 of private mount/UTS/PID namespaces, one per loopback address."""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sandbox import layout

INSIDE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AUDIT_LOG = "/var/log/systemctl-audit.log"
JOURNAL = "/var/log/fake-journal.jsonl"
STANDIN_KNOBS = "/etc/sglang-standin.json"


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


def _pids_in_ns(ns: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _pid_ns(int(entry)) == ns:
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


def _listener_inode(address: str, port: int) -> str | None:
    """The socket inode listening on address:port, from /proc/net/tcp."""
    packed = socket.inet_aton(address)[::-1].hex().upper() + f":{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if fields[1] == packed and fields[3] == "0A":  # 0A = LISTEN
            return fields[9]
    return None


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


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class SandboxHost:
    """One sandbox host. Only ``start``/``stop`` touch processes; the rest works on its files."""

    def __init__(self, sandbox: Sandbox, name: str, address: str, port: int = 22) -> None:
        self.sandbox = sandbox
        self.name = name
        self.address = address
        self.port = port
        self.dir = sandbox.workdir / "hosts" / name
        self.fs = self.dir / "fs"
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.pid = 0  # the namespace's PID 1 (sshd), as seen from the machine
        self.pid_ns: str | None = None
        self._unshare: subprocess.Popen[bytes] | None = None
        self._log = None

    def __repr__(self) -> str:
        return f"<SandboxHost {self.name} {self.address} pid={self.pid}>"

    # -- files -------------------------------------------------------------------------------------
    def path(self, inside: str) -> Path:
        """The machine path backing ``inside``: the host's own copy, or the machine's (read-only) file."""
        if not inside.startswith("/"):
            raise ValueError(f"not an absolute path: {inside!r}")
        norm = os.path.normpath(inside)
        for target in sorted(layout.PRIVATE_DIRS, key=len, reverse=True):
            if norm == target or norm.startswith(target + "/"):
                return layout.mirror(self.fs, norm)
        if norm.startswith("/etc/"):
            upper = self.fs / layout.ETC_UPPER / norm[len("/etc/") :]
            if upper.exists() or not os.path.exists(norm):
                return upper
        return Path(norm)

    def is_private(self, inside: str) -> bool:
        norm = os.path.normpath(inside)
        return norm.startswith("/etc/") or self.path(inside) != Path(norm)

    def write(self, inside: str, text: str, mode: int = 0o644) -> None:
        """Write a file inside the host (its /etc overlay is written from inside, to keep it coherent)."""
        if not self.is_private(inside):
            raise PermissionError(f"{inside} is on the read-only part of {self.name}")
        target = self.path(inside)
        if target.is_relative_to(self.fs / layout.ETC_UPPER):
            script = f"mkdir -p {shlex.quote(os.path.dirname(inside))} && cat > {shlex.quote(inside)}"
            self.run("/bin/sh", "-c", f"{script} && chmod {mode:o} {shlex.quote(inside)}", input=text, check=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        os.chmod(target, mode)

    def read(self, inside: str) -> str:
        return self.path(inside).read_text()

    # -- processes ---------------------------------------------------------------------------------
    def build(self, client_pubkey: str, ops_hash: str) -> None:
        if self.fs.exists():
            shutil.rmtree(self.fs)
        self.fs.mkdir(parents=True)
        layout.build_etc(self.fs, self.name, self.address, ops_hash)
        layout.build_ssh(self.fs, self.name, self.address, self.port, self.host_key)
        layout.build_homes(self.fs, client_pubkey)
        layout.build_runtime(self.fs)
        layout.build_bin(self.fs)
        plan = layout.mount_plan(self.fs, self.sandbox.shared_pkg)
        (self.dir / "init.sh").write_text(layout.init_script(self.name, self.fs, plan))

    def launch(self) -> None:
        if not address_free(self.address, self.port):
            raise SandboxError(f"{self.name}: {self.address}:{self.port} is already in use (another sandbox?)")
        self._log = open(self.dir / "sshd.log", "wb")  # noqa: SIM115 - closed in stop()
        self._unshare = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--uts",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "/bin/sh",
                str(self.dir / "init.sh"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, deadline: float) -> None:
        """Poll until sshd sends its banner (and PID 1 is known); raise with the log tail on failure."""
        assert self._unshare is not None
        while True:
            if self._unshare.poll() is not None:
                raise SandboxError(f"{self.name}: namespace exited ({self._unshare.returncode}): {self.log_tail()}")
            if not self.pid:
                kids = _children(self._unshare.pid)
                if kids:
                    self.pid = kids[0]
                    self.pid_ns = _pid_ns(self.pid)
            if self.pid and self._banner():
                inode = _listener_inode(self.address, self.port)
                if inode and _owns_socket(self.pid, inode):
                    return
            if time.monotonic() > deadline:
                raise SandboxError(f"{self.name}: sshd not ready in time: {self.log_tail()}")
            time.sleep(0.005)

    def _banner(self) -> bool:
        try:
            with socket.create_connection((self.address, self.port), timeout=0.5) as sock:
                return sock.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    def log_tail(self) -> str:
        try:
            return (self.dir / "sshd.log").read_text()[-2000:]
        except OSError:
            return ""

    def processes(self) -> list[int]:
        """Every process inside this host's PID namespace (machine PIDs)."""
        return _pids_in_ns(self.pid_ns) if self.pid_ns else []

    def rss_kib(self) -> int:
        own = [self._unshare.pid] if self._unshare and self._unshare.poll() is None else []
        return sum(_rss_kib(p) for p in own + self.processes())

    def stop(self) -> None:
        """Kill PID 1: the kernel then kills everything else in the namespace."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._unshare is not None:
            try:
                self._unshare.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._unshare.kill()
                self._unshare.wait()
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.005)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._unshare = None
        self.pid = 0

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
            "FAKE_SYSTEMD_NO_AUDIT": "1",
        }
        cmd = [
            "nsenter",
            "-t",
            str(self.pid),
            "-m",
            "-u",
            "-p",
            "-w",
            "-r",
            "--",
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in env.items()),
            *argv,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, input=input, timeout=timeout)

    def sh(self, script: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run("/bin/sh", "-c", script, check=check)

    # -- systemd helpers ---------------------------------------------------------------------------
    def systemctl(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", *args, check=check)

    def install_unit(self, name: str, text: str, *, start: bool = True) -> None:
        """Write /etc/systemd/system/NAME, daemon-reload and (by default) start it."""
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

    def audit(self) -> list[str]:
        """systemctl command lines this host received over SSH, in order (without the program name)."""
        try:
            text = self.read(AUDIT_LOG)
        except FileNotFoundError:
            return []
        return [shlex.join(json.loads(line)["argv"][1:]) for line in text.splitlines() if line.strip()]

    def journal(self, unit: str) -> list[str]:
        if not unit.endswith((".service", ".target", ".socket", ".timer")):
            unit += ".service"
        try:
            text = self.read(JOURNAL)
        except FileNotFoundError:
            return []
        entries = (json.loads(line) for line in text.splitlines() if line.strip())
        return [e["m"] for e in entries if e.get("u") == unit]

    def set_standin(self, **knobs: object) -> None:
        self.write(STANDIN_KNOBS, json.dumps(knobs, indent=2) + "\n")

    def kill_services(self) -> None:
        """SIGKILL every process in the host except its sshd listener (PID 1), and wait for them."""
        me = self.pid
        deadline = time.monotonic() + 10
        while True:
            others = [p for p in self.processes() if p != me]
            if not others:
                return
            for pid in others:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise SandboxError(f"{self.name}: processes survive: {others}")
            time.sleep(0.002)

    def reset(self) -> None:
        """Kill everything but sshd, then restore units, journal, audit, /run, /tmp, knobs and homes."""
        self.kill_services()
        fs = self.fs
        upper = fs / layout.ETC_UPPER
        keep = set(layout.ETC_FILES) | {d.split("/")[2] for d in layout.PRIVATE_DIRS if d.startswith("/etc/")}
        extra = [f"/etc/{c.name}" for c in upper.iterdir() if c.name not in keep]
        if extra:  # through the overlay, so it forgets them too
            self.run("rm", "-rf", "--", *extra, check=True)
        _empty_dir(layout.mirror(fs, "/etc/systemd/system"))
        for inside in ("/var/log", "/var/lib", "/tmp", "/var/tmp"):
            _empty_dir(layout.mirror(fs, inside))
        _empty_dir(layout.mirror(fs, "/run"), keep={"sshd", "sshd.pid"})
        _empty_dir(layout.mirror(fs, "/root"), keep={".ssh"})
        for user in layout.USERS:
            _empty_dir(layout.mirror(fs, f"/home/{user}"), keep={".ssh"})
        # Bind-mount points inside the host must survive: removing one detaches its mount there.
        _empty_dir(layout.mirror(fs, "/opt"), keep={"sglang"})
        _empty_dir(layout.mirror(fs, "/opt/sglang"), keep={"standin"})
        _empty_dir(layout.mirror(fs, "/usr/local/bin"), keep={".fake-systemd"})
        _empty_dir(layout.mirror(fs, "/etc/default"))
        layout.build_etc_default(fs)
        layout.build_runtime(fs)
        layout.build_bin(fs)


def _empty_dir(path: Path, keep: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    path.mkdir(parents=True, exist_ok=True)
    for child in path.iterdir():
        if child.name in keep:
            continue
        if child.is_dir() and not child.is_symlink():
            if os.path.ismount(child):
                continue
            shutil.rmtree(child)
        else:
            child.unlink()


class Sandbox:
    """N sandbox hosts sharing one client key, known_hosts and ssh_config. A context manager."""

    def __init__(
        self, workdir: Path, n_hosts: int, *, first_address: str = "127.42.0.10", name_prefix: str = "gpu-"
    ) -> None:
        self.workdir = Path(workdir).resolve()
        first = ipaddress.IPv4Address(first_address)
        self.hosts = [SandboxHost(self, f"{name_prefix}{i}", str(first + i)) for i in range(n_hosts)]
        self.identity = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.ssh_config = self.workdir / "ssh_config"
        self.shared_pkg = self.workdir / "shared" / "fake-systemd"
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
            return "sandbox hosts need root (mount/PID namespaces, sshd on port 22)"
        for tool in (
            "/usr/sbin/sshd",
            shutil.which("unshare"),
            shutil.which("nsenter"),
            shutil.which("ssh-keygen"),
            shutil.which("sudo"),
            layout.HOST_PYTHON,
        ):
            if not tool or not os.path.exists(tool):
                return f"missing {tool or 'unshare/nsenter/ssh-keygen/sudo'} (run sandbox/system-deps.sh)"
        return None

    def start(self, timeout: float = 30) -> None:
        reason = self.unavailable_reason()
        if reason:
            raise SandboxError(reason)
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
        layout.prepare_shared(self.workdir / "shared")
        pubkey = self.identity.with_suffix(".pub").read_text()
        ops_hash = layout.ops_password_hash()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda h: h.build(pubkey, ops_hash), self.hosts))
        self._write_client_files()
        self.started = True
        # Concurrent sessions on this machine: check-and-bind of the addresses happens under one lock.
        with open(os.path.join(tempfile.gettempdir(), ".remediate-sandbox-addresses.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                for host in self.hosts:
                    host.launch()
                deadline = time.monotonic() + timeout
                for host in self.hosts:
                    host.wait_ready(deadline)
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
        for host in self.hosts:
            if not host.pid and host._unshare is not None:  # failed before PID 1 was seen
                host.pid = next(iter(_children(host._unshare.pid)), 0)
            if host.pid or host._unshare is not None:
                host.stop()
        self.started = False

    def processes(self) -> list[int]:
        """Every live process this sandbox started (unshare parents and everything inside the hosts)."""
        pids: list[int] = []
        for host in self.hosts:
            if host._unshare is not None and host._unshare.poll() is None:
                pids.append(host._unshare.pid)
            pids.extend(host.processes())
        return pids

    def rss_kib(self) -> int:
        return sum(host.rss_kib() for host in self.hosts)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until each host runs only its sshd listener (the readiness probes' sessions are gone)."""
        deadline = time.monotonic() + timeout
        while any(host.processes() != [host.pid] for host in self.hosts):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True
