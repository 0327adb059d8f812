"""Sandbox hosts: isolation, read-only root, pinned host keys, key-only SSH, sudo users, shims."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from sandbox import Sandbox, SandboxHost

pytestmark = pytest.mark.integration


def ssh(fleet: Sandbox, host: SandboxHost, command: str, *extra: str, user: str = "root"):
    return subprocess.run(
        ["ssh", "-F", str(fleet.ssh_config), *extra, "-l", user, host.name, command],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def paramiko_client(fleet: Sandbox, known_hosts: Path) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def test_file_written_on_one_host_is_invisible_on_another(sandbox_hosts):
    a, b = sandbox_hosts[0], sandbox_hosts[1]
    a.write("/etc/systemd/system/only-a.service", "[Service]\nExecStart=/bin/true\n")
    assert a.run("cat", "/etc/systemd/system/only-a.service").returncode == 0
    assert b.run("test", "-e", "/etc/systemd/system/only-a.service").returncode == 1
    a.run("sh", "-c", "echo a > /tmp/x; echo a > /etc/written-a", check=True)
    assert b.run("test", "-e", "/tmp/x").returncode == 1
    assert b.run("test", "-e", "/etc/written-a").returncode == 1
    assert not Path("/etc/written-a").exists()  # the machine's /etc is untouched
    assert a.run("hostname").stdout.strip() == a.name
    assert b.run("hostname").stdout.strip() == b.name


def test_writes_outside_per_host_dirs_fail(sandbox_host):
    targets = ["/usr/sandbox-probe", "/srv/sandbox-probe", "/var/cache/sandbox-probe"]
    checkout = Path(__file__).parent
    if not sandbox_host.is_private(str(checkout)):  # a checkout under /tmp is hidden by the host's own /tmp
        targets.append(str(checkout / "probe"))
    for target in targets:
        result = sandbox_host.run("touch", target)
        assert result.returncode != 0
        assert "Read-only file system" in result.stderr
    with pytest.raises(PermissionError):
        sandbox_host.write("/usr/lib/x", "no")


def test_machine_root_home_and_ssh_config_are_not_shared(sandbox_host):
    inside = sandbox_host.run("ls", "-A", "/root").stdout.split()
    assert inside == [".ssh"]
    host_key = sandbox_host.run("cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
    assert host_key != Path("/etc/ssh/ssh_host_ed25519_key.pub").read_text()


def test_ssh_with_generated_config_as_root(sandbox_fleet, sandbox_host):
    result = ssh(sandbox_fleet, sandbox_host, "hostname; id -u; echo $PATH")
    assert result.returncode == 0, result.stderr
    name, uid, path = result.stdout.split()
    assert (name, uid) == (sandbox_host.name, "0")
    assert path.startswith("/usr/local/sbin:/usr/local/bin")
    assert ssh(sandbox_fleet, sandbox_host, "command -v systemctl").stdout.strip() == "/usr/local/bin/systemctl"


def test_paramiko_with_reject_policy_and_known_hosts(sandbox_fleet, sandbox_host):
    client = paramiko_client(sandbox_fleet, sandbox_fleet.known_hosts)
    try:
        client.connect(
            sandbox_host.address,
            port=22,
            username="root",
            key_filename=str(sandbox_fleet.identity),
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
        _stdin, stdout, _stderr = client.exec_command("hostname")
        assert stdout.read().decode().strip() == sandbox_host.name
    finally:
        client.close()


def test_unknown_host_key_is_refused_by_paramiko(sandbox_fleet, sandbox_host, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    client = paramiko_client(sandbox_fleet, empty)
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        client.connect(
            sandbox_host.address,
            username="root",
            key_filename=str(sandbox_fleet.identity),
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
    client.close()


def test_changed_host_key_is_refused(sandbox_fleet, sandbox_hosts, tmp_path):
    a, b = sandbox_hosts[0], sandbox_hosts[1]
    lines = sandbox_fleet.known_hosts.read_text().splitlines()
    b_key = next(line.split(" ", 1)[1] for line in lines if line.startswith(b.address + " "))
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{a.address} {b_key}\n")  # a's address pinned to b's key
    client = paramiko_client(sandbox_fleet, wrong)
    with pytest.raises(paramiko.BadHostKeyException):
        client.connect(
            a.address,
            username="root",
            key_filename=str(sandbox_fleet.identity),
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
    client.close()
    result = ssh(sandbox_fleet, a, "true", "-o", f"UserKnownHostsFile={wrong}", "-o", "StrictHostKeyChecking=yes")
    assert result.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in result.stderr or "verification failed" in result.stderr
    empty = tmp_path / "empty"
    empty.write_text("")
    result = ssh(sandbox_fleet, a, "true", "-o", f"UserKnownHostsFile={empty}", "-o", "StrictHostKeyChecking=yes")
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr


def test_password_login_is_refused(sandbox_fleet, sandbox_host):
    result = ssh(
        sandbox_fleet,
        sandbox_host,
        "true",
        "-o",
        "IdentityFile=/dev/null",
        "-o",
        "PreferredAuthentications=password,keyboard-interactive",
        user="ops",
    )
    assert result.returncode == 255
    assert "Permission denied" in result.stderr


def test_deploy_has_passwordless_sudo_and_ops_needs_a_password(sandbox_fleet, sandbox_host):
    deploy = ssh(sandbox_fleet, sandbox_host, "id -un; sudo -n true && sudo -n id -u", user="deploy")
    assert deploy.returncode == 0, deploy.stderr
    assert deploy.stdout.split() == ["deploy", "0"]
    ops = ssh(sandbox_fleet, sandbox_host, "id -un; sudo -n true", user="ops")
    assert ops.returncode == 1
    assert ops.stdout.strip() == "ops"
    assert "a password is required" in ops.stderr
    assert "unable to resolve host" not in deploy.stderr + ops.stderr


def test_pid_namespace_and_pid1_is_sshd(sandbox_host):
    assert Path(f"/proc/{sandbox_host.pid}/comm").read_text().strip() == "sshd"
    ps = sandbox_host.run("ps", "-o", "pid=,comm=", "-p", "1").stdout.split()
    assert ps == ["1", "sshd"]


def test_sglang_venv_and_docker_shim(sandbox_host):
    version = sandbox_host.run("/opt/sglang/bin/python3", "-c", "import sys; print(sys.path[1])")
    assert version.stdout.strip() == "/opt/sglang/standin"
    env = sandbox_host.run(
        "docker",
        "run",
        "--rm",
        "--gpus",
        "all",
        "--name",
        "sg",
        "-v",
        "/x:/y",
        "-p",
        "1:1",
        "--shm-size",
        "32g",
        "--ipc=host",
        "--network",
        "host",
        "-e",
        "FOO=bar",
        "--env=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "lmsysorg/sglang:v0.5.6",
        "sh",
        "-c",
        "echo $FOO $PYTORCH_CUDA_ALLOC_CONF; command -v python3",
    )
    assert env.returncode == 0, env.stderr
    assert env.stdout.split() == ["bar", "expandable_segments:True", "/opt/sglang/bin/python3"]
    podman = sandbox_host.run("podman", "run", "-d", "img", "echo", "ok")
    assert podman.stdout.strip() == "ok"


def test_http_service_in_a_unit_answers_from_the_machine(sandbox_host):
    sandbox_host.install_unit(
        "web.service",
        "[Service]\nExecStart=/usr/bin/python3 -m http.server 30000 "
        f"--bind {sandbox_host.address} --directory /etc/systemd/system\n",
    )
    deadline = time.monotonic() + 10
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"http://{sandbox_host.address}:30000/web.service", timeout=1) as resp:
                assert b"ExecStart" in resp.read()
                break
        except OSError:
            assert time.monotonic() < deadline, sandbox_host.journal("web")
            time.sleep(0.02)


STANDIN = Path(__file__).resolve().parents[2] / "sandbox" / "standin" / "sglang" / "launch_server.py"


@pytest.mark.skipif(not STANDIN.exists(), reason="the sglang stand-in is not there yet")
@pytest.mark.parametrize(
    "launcher", ["/opt/sglang/bin/python3 -m sglang.launch_server", "/opt/sglang/bin/sglang serve"]
)
def test_sglang_standin_runs_as_a_unit(sandbox_host, launcher):
    import json
    import urllib.request

    host = sandbox_host
    host.set_standin(time_scale=0.001, warmup_s=1)
    host.install_unit(
        "sglang.service",
        "[Unit]\nDescription=SGLang\n[Service]\n"
        'Environment="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"\n'
        f"ExecStart={launcher} --model-path moonshotai/Kimi-K2.6 --tp 8 \\\n"
        f"  --mem-fraction-static 0.93 --chunked-prefill-size 4096 --host {host.address} --port 30000\n",
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{host.address}:30000/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "\n".join(host.journal("sglang")[-20:])
        assert host.systemctl("is-failed", "sglang").returncode == 1, "\n".join(host.journal("sglang")[-20:])
        time.sleep(0.05)
    with urllib.request.urlopen(f"http://{host.address}:30000/get_server_info", timeout=5) as resp:
        info = json.load(resp)
    assert "195011" in json.dumps(info)
    assert any("max_total_num_tokens=195011" in line for line in host.journal("sglang"))
