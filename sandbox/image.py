"""What each sandbox host adds on top of the shared image: its overlay upper directory, written before boot.

The image (``sandbox/rootfs``) holds Debian's packages and the users; everything here is per host or is
sandbox tooling that may change without rebuilding the image: hostname, machine-id, ``sshd_config`` (its
own loopback address only), the ed25519 host key, ``authorized_keys``, the logging ``systemctl`` wrapper,
the ``docker``/``podman`` shim and the sglang "venv" shims under ``/opt/sglang/bin``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STANDIN = REPO / "sandbox" / "standin"
STANDIN_INSIDE = "/opt/sglang/standin"  # read-only bind of <repo>/sandbox/standin
AUDIT_LOG = "/var/log/systemctl-audit.log"
STANDIN_KNOBS = "/etc/sglang-standin.json"
USERS = {"deploy": 2001, "ops": 2002}  # made in the image (sandbox/rootfs/customize.sh)
OPS_PASSWORD = "ops-password"

SSHD_CONFIG = """\
# sandbox host {name}: key-only logins on its own loopback address, nowhere else
ListenAddress {address}:{port}
HostKey /etc/ssh/ssh_host_ed25519_key
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

# Early in PATH (sshd's and sudo's secure_path put /usr/local/bin before /usr/bin): one line per call —
# effective uid, the calling user (SUDO_USER under sudo), then the arguments shell-quoted — then the real
# systemctl. SANDBOX_NO_AUDIT=1 (set by SandboxHost.run) skips the line, so the log holds only what arrived
# over SSH. Calls through an absolute /usr/bin/systemctl (or D-Bus) bypass it.
SYSTEMCTL_WRAPPER = f"""\
#!/bin/bash
# sandbox: log this systemctl invocation, then run the real one
if [ -z "${{SANDBOX_NO_AUDIT:-}}" ]; then
  printf -v _sandbox_line '%q ' "$EUID" "${{SUDO_USER:-${{USER:-?}}}}" "$@"
  {{ printf '%s\\n' "${{_sandbox_line% }}" >> {AUDIT_LOG}; }} 2>/dev/null
fi
exec /usr/bin/systemctl "$@"
"""

OPT_PYTHON = f"""\
#!/bin/sh
# Stand-in for an sglang venv's interpreter: the image's python3 with the sglang stand-in importable.
PYTHONPATH="{STANDIN_INSIDE}${{PYTHONPATH:+:$PYTHONPATH}}"
export PYTHONPATH
exec /usr/bin/python3 "$@"
"""

OPT_SGLANG = """\
#!/bin/sh
# The sglang console script: `sglang serve ARGS` runs the stand-in's server (sglang.cli.main).
exec /opt/sglang/bin/python3 -m sglang.cli.main "$@"
"""

# python3 -m sglang.launch_server with the image's own python3 (units that do not use /opt/sglang/bin).
SITE_PTH = f"{STANDIN_INSIDE}\n"
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"


def mirror(upper: Path, inside: str) -> Path:
    return upper / inside.lstrip("/")


def _write(path: Path, text: str, mode: int = 0o644, owner: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    os.chown(path, owner, owner)


def _authorize(upper: Path, home: str, uid: int, pubkey: str) -> None:
    dot_ssh = mirror(upper, home) / ".ssh"
    dot_ssh.mkdir(parents=True, exist_ok=True)
    _write(dot_ssh / "authorized_keys", pubkey, 0o600, uid)
    os.chmod(dot_ssh, 0o700)
    os.chown(dot_ssh, uid, uid)
    os.chmod(dot_ssh.parent, 0o700 if uid == 0 else 0o755)
    os.chown(dot_ssh.parent, uid, uid)


def build_upper(upper: Path, *, name: str, address: str, port: int, host_key: Path, client_pubkey: str) -> str:
    """Fill a fresh overlay upper directory for one host; returns its machine-id."""
    machine_id = uuid.uuid4().hex
    _write(mirror(upper, "/etc/hostname"), name + "\n")
    _write(mirror(upper, "/etc/machine-id"), machine_id + "\n", 0o444)
    _write(mirror(upper, "/etc/hosts"), f"127.0.0.1\tlocalhost\n{address}\t{name}\n::1\tlocalhost ip6-localhost\n")
    ssh = mirror(upper, "/etc/ssh")
    _write(ssh / "sshd_config", SSHD_CONFIG.format(name=name, address=address, port=port))
    shutil.copyfile(host_key, ssh / "ssh_host_ed25519_key")
    os.chmod(ssh / "ssh_host_ed25519_key", 0o600)
    shutil.copyfile(host_key.with_suffix(".pub"), ssh / "ssh_host_ed25519_key.pub")
    _authorize(upper, "/root", 0, client_pubkey)
    for user, uid in USERS.items():
        _authorize(upper, f"/home/{user}", uid, client_pubkey)
    build_tools(upper)
    return machine_id


def build_tools(upper: Path) -> None:
    """The sandbox's own programs inside a host (also what reset() puts back)."""
    ulb = mirror(upper, "/usr/local/bin")
    _write(ulb / "systemctl", SYSTEMCTL_WRAPPER, 0o755)
    shim = (REPO / "sandbox" / "dockershim.py").read_text()
    docker = (
        "#!/usr/bin/python3 -IS\n"
        + shim
        + "\n\nif __name__ == '__main__':\n    import sys\n\n    sys.exit(main(sys.argv))\n"
    )
    _write(ulb / "docker", docker, 0o755)
    _write(ulb / "podman", docker, 0o755)
    smi = ulb / "nvidia-smi"  # the stand-in's GPU board (sandbox/standin/bin/nvidia-smi)
    if not smi.is_symlink():
        smi.symlink_to(f"{STANDIN_INSIDE}/bin/nvidia-smi")
    opt_bin = mirror(upper, "/opt/sglang/bin")
    _write(opt_bin / "python3", OPT_PYTHON, 0o755)
    _write(opt_bin / "python", OPT_PYTHON, 0o755)
    _write(opt_bin / "sglang", OPT_SGLANG, 0o755)
    mirror(upper, STANDIN_INSIDE).mkdir(parents=True, exist_ok=True)
    _write(mirror(upper, SITE_PACKAGES) / "sglang-standin.pth", SITE_PTH)
    _write(mirror(upper, AUDIT_LOG), "", 0o666)
