"""Where a sandbox host's private files live on the machine, and how its filesystem is assembled.

A host is a directory ``<workdir>/hosts/<name>/`` holding ``fs/`` (a mirror of the paths bind-mounted
over the machine's own inside the host's mount namespace), its keys and its sshd log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOST_PYTHON = "/usr/bin/python3"  # the machine's Debian python; /root (pyenv, venvs) is hidden inside hosts

# Directories bind-mounted from the host's fs/ over the machine's (everything else is read-only).
PRIVATE_DIRS = (
    "/etc/systemd/system",
    "/etc/ssh",
    "/etc/default",
    "/etc/sudoers.d",
    "/run",
    "/var/log",
    "/var/lib",
    "/root",
    "/home",
    "/opt",
    "/tmp",
    "/var/tmp",
    "/usr/local/bin",
)
# The rest of /etc is an overlay: the machine's /etc below, a per-host upper dir holding the host's own
# passwd/group/shadow/sudoers/hosts/hostname and anything written to /etc inside the host.
ETC_UPPER = "etc-upper"
ETC_WORK = "etc-work"
ETC_FILES = ("passwd", "group", "shadow", "sudoers", "hosts", "hostname")
# Our systemctl/journalctl also replace the machine's binaries, for callers that use absolute paths.
SHADOWED_BINARIES = {"/usr/bin/systemctl": "systemctl", "/usr/bin/journalctl": "journalctl"}
FAKE_SYSTEMD_INSIDE = "/usr/local/bin/.fake-systemd"  # read-only bind of the compiled fakesystemd package
STANDIN_INSIDE = "/opt/sglang/standin"  # read-only bind of <repo>/sandbox/standin

USERS = {  # name: (uid, sudo rule)
    "deploy": (2001, "ALL=(ALL:ALL) NOPASSWD: ALL"),
    "ops": (2002, "ALL=(ALL:ALL) ALL"),
}
OPS_PASSWORD = "ops-password"

SSHD_CONFIG = """\
# sandbox host {name}: key-only logins
ListenAddress {address}:{port}
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile .ssh/authorized_keys
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
MaxStartups 200:30:400
MaxSessions 64
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
LogLevel ERROR
"""

OPT_PYTHON = f"""\
#!/bin/sh
# Stand-in for an sglang venv's interpreter: the machine's python3 with the sglang stand-in importable.
PYTHONPATH="{STANDIN_INSIDE}${{PYTHONPATH:+:$PYTHONPATH}}"
export PYTHONPATH
exec {HOST_PYTHON} "$@"
"""

OPT_SGLANG = """\
#!/bin/sh
# The sglang console script: `sglang serve ARGS` runs the stand-in's server (sglang.cli.main).
exec /opt/sglang/bin/python3 -m sglang.cli.main "$@"
"""

LAUNCHER = f"""\
#!{HOST_PYTHON} -IS
import sys
sys.path.insert(0, {FAKE_SYSTEMD_INSIDE!r})
from fakesystemd.{{module}} import main
sys.exit(main(sys.argv))
"""


def mirror(fs: Path, inside: str) -> Path:
    """The machine path under a host's fs/ that backs ``inside``."""
    return fs / inside.lstrip("/")


def _copy_tree_or_empty(src: str, dst: Path) -> None:
    if os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    dst.mkdir(parents=True, exist_ok=True)


def prepare_shared(shared: Path) -> Path:
    """Copy and byte-compile the fakesystemd package once for all hosts; returns the package root."""
    target = shared / "fake-systemd"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(
        REPO / "sandbox" / "fakesystemd",
        target / "fakesystemd",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    subprocess.run([HOST_PYTHON, "-m", "compileall", "-q", str(target)], check=True)
    return target


def ops_password_hash() -> str:
    """A crypt(3) hash for ``ops`` so sudo asks for (and can verify) a password."""
    if shutil.which("openssl"):
        out = subprocess.run(
            ["openssl", "passwd", "-6", "-salt", "sandboxsalt", OPS_PASSWORD],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode == 0:
            return out.stdout.strip()
    return "*"


def build_etc(fs: Path, name: str, address: str, ops_hash: str) -> None:
    """Per-host passwd/group/shadow/sudoers/hosts: the machine's plus the sandbox users."""
    etc = fs / ETC_UPPER
    etc.mkdir(parents=True, exist_ok=True)
    (fs / ETC_WORK).mkdir(exist_ok=True)
    passwd = [ln for ln in Path("/etc/passwd").read_text().splitlines() if ln.split(":")[0] not in USERS]
    group = [ln for ln in Path("/etc/group").read_text().splitlines() if ln.split(":")[0] not in USERS]
    shadow = []
    for line in passwd:
        user = line.split(":")[0]
        shadow.append(f"{user}:*:19000:0:99999:7:::")
    for user, (uid, _rule) in USERS.items():
        passwd.append(f"{user}:x:{uid}:{uid}::/home/{user}:/bin/bash")
        group.append(f"{user}:x:{uid}:")
        shadow.append(f"{user}:{ops_hash if user == 'ops' else '*'}:19000:0:99999:7:::")
    (etc / "passwd").write_text("\n".join(passwd) + "\n")
    (etc / "group").write_text("\n".join(group) + "\n")
    (etc / "shadow").write_text("\n".join(shadow) + "\n")
    os.chmod(etc / "shadow", 0o640)
    shutil.copy2("/etc/sudoers", etc / "sudoers")
    os.chmod(etc / "sudoers", 0o440)
    sudoers_d = fs / "etc" / "sudoers.d"
    _copy_tree_or_empty("/etc/sudoers.d", sudoers_d)
    rules = "".join(f"{user} {rule}\n" for user, (_uid, rule) in USERS.items())
    (sudoers_d / "sandbox").write_text(rules)
    os.chmod(sudoers_d / "sandbox", 0o440)
    (etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n{address}\t{name}\n::1\tlocalhost ip6-localhost\n")
    (etc / "hostname").write_text(name + "\n")
    build_etc_default(fs)
    (fs / "etc" / "systemd" / "system").mkdir(parents=True, exist_ok=True)


def build_etc_default(fs: Path) -> None:
    _copy_tree_or_empty("/etc/default", fs / "etc" / "default")


def build_ssh(fs: Path, name: str, address: str, port: int, host_key: Path) -> None:
    ssh = fs / "etc" / "ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    for client_file in ("ssh_config",):
        if os.path.exists(f"/etc/ssh/{client_file}"):
            shutil.copy2(f"/etc/ssh/{client_file}", ssh / client_file)
    (ssh / "sshd_config").write_text(SSHD_CONFIG.format(name=name, address=address, port=port))
    shutil.copy2(host_key, ssh / "ssh_host_ed25519_key")
    shutil.copy2(host_key.with_suffix(".pub"), ssh / "ssh_host_ed25519_key.pub")
    os.chmod(ssh / "ssh_host_ed25519_key", 0o600)


def _authorize(home: Path, uid: int, pubkey: str) -> None:
    dot_ssh = home / ".ssh"
    dot_ssh.mkdir(parents=True, exist_ok=True)
    (dot_ssh / "authorized_keys").write_text(pubkey)
    os.chmod(home, 0o700 if uid == 0 else 0o755)
    os.chmod(dot_ssh, 0o700)
    os.chmod(dot_ssh / "authorized_keys", 0o600)
    for path in (home, dot_ssh, dot_ssh / "authorized_keys"):
        os.chown(path, uid, uid)


def build_homes(fs: Path, pubkey: str) -> None:
    _authorize(fs / "root", 0, pubkey)
    for user, (uid, _rule) in USERS.items():
        _authorize(fs / "home" / user, uid, pubkey)


def build_runtime(fs: Path) -> None:
    """Fresh /run, /tmp, /var/* for a host (also what reset() restores)."""
    (fs / "run" / "sshd").mkdir(parents=True, exist_ok=True)
    os.chmod(fs / "run" / "sshd", 0o755)
    (fs / "run" / "fake-systemd").mkdir(exist_ok=True)
    for tmp in ("tmp", "var/tmp"):
        (fs / tmp).mkdir(parents=True, exist_ok=True)
        os.chmod(fs / tmp, 0o1777)
    (fs / "var" / "log").mkdir(parents=True, exist_ok=True)
    (fs / "var" / "lib").mkdir(parents=True, exist_ok=True)


def _write_exec(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, 0o755)


def build_bin(fs: Path) -> None:
    """/usr/local/bin (systemctl, journalctl, docker, podman) and the /opt/sglang 'venv'."""
    ulb = mirror(fs, "/usr/local/bin")
    ulb.mkdir(parents=True, exist_ok=True)
    (ulb / ".fake-systemd").mkdir(exist_ok=True)
    for tool in ("systemctl", "journalctl"):
        _write_exec(ulb / tool, LAUNCHER.format(module=tool))
    docker = LAUNCHER.format(module="docker")
    _write_exec(ulb / "docker", docker)
    _write_exec(ulb / "podman", docker)
    smi = ulb / "nvidia-smi"  # the stand-in's GPU board (sandbox/standin/bin/nvidia-smi)
    if not smi.is_symlink():
        smi.symlink_to(f"{STANDIN_INSIDE}/bin/nvidia-smi")
    opt_bin = mirror(fs, "/opt/sglang/bin")
    _write_exec(opt_bin / "python3", OPT_PYTHON)
    _write_exec(opt_bin / "python", OPT_PYTHON)
    _write_exec(opt_bin / "sglang", OPT_SGLANG)
    mirror(fs, STANDIN_INSIDE).mkdir(parents=True, exist_ok=True)


def mount_plan(fs: Path, shared_pkg: Path) -> list[tuple[str, str, bool]]:
    """(source on the machine, target inside, read_only) in an order that keeps every source reachable.

    A target that is an ancestor of a later source (the workdir under /tmp or /root) would hide it,
    so such mounts go last. The /etc overlay is mounted first, by init_script().
    """
    plan: list[tuple[str, str, bool]] = []
    for inside in PRIVATE_DIRS:
        plan.append((str(mirror(fs, inside)), inside, False))
    for inside, tool in SHADOWED_BINARIES.items():
        if os.path.exists(inside):
            plan.append((str(mirror(fs, "/usr/local/bin") / tool), inside, False))
    plan.append((str(shared_pkg), FAKE_SYSTEMD_INSIDE, True))
    standin = REPO / "sandbox" / "standin"
    if standin.is_dir():
        plan.append((str(standin), STANDIN_INSIDE, True))
    sources = [src for src, _t, _ro in plan]

    def hides_a_source(item: tuple[str, str, bool]) -> bool:
        target = item[1].rstrip("/") + "/"
        return any(src.startswith(target) for src in sources)

    # Parents before children (so /opt/sglang/standin lands on the host's /opt), hiders last.
    return sorted(plan, key=lambda item: (hides_a_source(item), item[1].count("/")))


def init_script(name: str, fs: Path, plan: list[tuple[str, str, bool]]) -> str:
    """The shell run as PID 1 of the new namespaces: mounts, read-only root, then exec sshd."""
    upper, work = fs / ETC_UPPER, fs / ETC_WORK
    lines = [
        "set -eu",
        f"hostname {name}",
        f"mount -t overlay overlay -o 'lowerdir=/etc,upperdir={upper},workdir={work}' /etc",
    ]
    for src, target, _ro in plan:
        lines.append(f"mount --bind '{src}' '{target}'")
    lines.append("mount -t tmpfs -o size=256m,mode=1777 tmpfs /dev/shm")
    lines.append("mount -o remount,bind,ro /")
    for _src, target, ro in plan:
        if ro:
            lines.append(f"mount -o remount,bind,ro '{target}'")
    lines.append("/usr/sbin/sshd -t")
    lines.append("exec /usr/sbin/sshd -D -e")
    return "\n".join(lines) + "\n"
