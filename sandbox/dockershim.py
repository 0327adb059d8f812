"""`docker`/`podman` shim, /usr/local/bin/docker and podman in every sandbox host: `run [opts] IMAGE CMD…`
runs CMD on the host with the -e/--env-file variables.

Without ``--network host``, a ``-p [IP:]HOST:CONTAINER`` mapping is emulated the only way a process on the
host can have it: the server's ``--port CONTAINER`` becomes ``--port HOST`` (and its ``--host`` the IP, when
the mapping names one), so the server is reachable on the host port only, as behind docker's proxy.

The image's Python is the sandbox's sglang 'venv' (/opt/sglang/bin first in PATH). Other verbs are no-ops.
"""

from __future__ import annotations

import os
import sys

VALUE_OPTS = {
    "-e",
    "--env",
    "--env-file",
    "--gpus",
    "--name",
    "-v",
    "--volume",
    "-p",
    "--publish",
    "--shm-size",
    "--ipc",
    "--network",
    "--net",
    "-w",
    "--workdir",
    "--entrypoint",
    "-u",
    "--user",
    "--runtime",
    "--ulimit",
    "--device",
    "--cpus",
    "--memory",
    "-m",
    "--restart",
    "-l",
    "--label",
    "--mount",
    "--add-host",
    "-h",
    "--hostname",
    "--pid",
    "--log-driver",
    "--log-opt",
    "--cap-add",
    "--cap-drop",
    "--security-opt",
    "--cidfile",
    "--platform",
    "--pull",
    "--stop-signal",
    "--stop-timeout",
    "--tmpfs",
    "--userns",
    "--uts",
    "--group-add",
    "--health-cmd",
    "--health-interval",
    "--memory-swap",
    "--cpuset-cpus",
    "--dns",
}


def _read_env_file(path: str) -> dict[str, str]:
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, eq, value = line.partition("=")
                if eq:
                    env[key] = value
                elif key in os.environ:
                    env[key] = os.environ[key]
    return env


def run(args: list[str]) -> int:
    env = {
        "PATH": "/opt/sglang/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "HOSTNAME": os.uname().nodename,
    }
    for key in ("INVOCATION_ID", "LANG"):
        if key in os.environ:
            env[key] = os.environ[key]
    entrypoint: list[str] = []
    workdir = "/"
    publish: list[str] = []
    network = ""
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "-":
            break
        name, value = arg, None
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        elif arg in VALUE_OPTS:
            i += 1
            value = args[i] if i < len(args) else ""
        elif len(arg) > 2 and arg[:2] in ("-e", "-v", "-p", "-w", "-u", "-m", "-l", "-h") and arg[1] != "-":
            name, value = arg[:2], arg[2:]
        i += 1
        if name in ("-e", "--env") and value is not None:
            key, eq, val = value.partition("=")
            if eq:
                env[key] = val
            elif key in os.environ:
                env[key] = os.environ[key]
        elif name == "--env-file" and value:
            env.update(_read_env_file(value))
        elif name == "--entrypoint" and value:
            entrypoint = [value]
        elif name in ("-w", "--workdir") and value:
            workdir = value
        elif name in ("-p", "--publish") and value:
            publish.append(value.lstrip("="))
        elif name in ("--network", "--net") and value:
            network = value
    if i >= len(args):
        sys.stderr.write('docker: "docker run" requires at least 1 argument.\n')
        return 125
    command = entrypoint + args[i + 1 :]
    if not command:
        sys.stderr.write(f"docker: image {args[i]} has no default command in the sandbox; pass one.\n")
        return 125
    if publish and network != "host":
        command = _published(command, publish)
    if os.path.isdir(workdir):
        os.chdir(workdir)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        sys.stderr.write(f"docker: Error response from daemon: exec: {command[0]!r}: {exc.strerror}\n")
        return 127


def _published(command: list[str], publish: list[str]) -> list[str]:
    """The server's ``--port``/``--host`` as the host sees them through ``-p [IP:]HOST:CONTAINER``."""
    out = list(command)
    for spec in publish:
        parts = spec.split("/", 1)[0].rsplit(":", 2)
        if len(parts) < 2 or not parts[-1].isdigit() or not parts[-2].isdigit():
            continue
        ip = parts[0].strip("[]") if len(parts) == 3 else ""
        for i, word in enumerate(out[:-1]):
            if word == "--port" and out[i + 1] == parts[-1]:
                out[i + 1] = parts[-2]
                if ip:
                    for j, other in enumerate(out[:-1]):
                        if other == "--host":
                            out[j + 1] = ip
    return out


def main(argv: list[str]) -> int:
    args = argv[1:]
    while args and args[0].startswith("-"):  # global options (--log-level x, -H …) are ignored
        args = args[1:]
    if not args:
        return 0
    verb = args[0]
    if verb == "run":
        return run(args[1:])
    if verb == "ps":
        print("CONTAINER ID   IMAGE     COMMAND   CREATED   STATUS    PORTS     NAMES")
        return 0
    return 0  # pull, rm, stop, kill, inspect …: nothing to do on a sandbox host
