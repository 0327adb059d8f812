"""Sandbox hosts: real systemd as PID 1, isolation, pinned host keys, key-only SSH, sudo users, shims, audit."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from sandbox import Sandbox, SandboxHost
from sandbox.units import free_port

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


def test_file_written_on_one_host_is_invisible_on_another(fresh_hosts):
    a, b = fresh_hosts(2)
    a.write("/etc/systemd/system/only-a.service", "[Service]\nExecStart=/bin/true\n")
    assert a.run("cat", "/etc/systemd/system/only-a.service").returncode == 0
    assert b.run("test", "-e", "/etc/systemd/system/only-a.service").returncode == 1
    a.run("sh", "-c", "echo a > /tmp/x; echo a > /etc/written-a", check=True)
    assert b.run("test", "-e", "/tmp/x").returncode == 1
    assert b.run("test", "-e", "/etc/written-a").returncode == 1
    assert not Path("/etc/written-a").exists()  # the machine's /etc is untouched
    assert a.run("hostname").stdout.strip() == a.name
    assert b.run("hostname").stdout.strip() == b.name


def test_writes_anywhere_stay_on_their_host_and_the_standin_is_read_only(fresh_hosts, sandbox_fleet):
    a, b = fresh_hosts(2)
    a.run("sh", "-c", "echo a > /usr/sandbox-probe", check=True)
    assert b.run("test", "-e", "/usr/sandbox-probe").returncode == 1
    assert not Path("/usr/sandbox-probe").exists()
    assert not (sandbox_fleet.image / "usr" / "sandbox-probe").exists()  # the shared image is untouched
    result = a.run("touch", "/opt/sglang/standin/probe")
    assert result.returncode != 0
    assert "Read-only file system" in result.stderr
    with pytest.raises(PermissionError):
        a.write("/opt/sglang/standin/x", "no")


def test_machine_root_home_and_ssh_config_are_not_shared(sandbox_host):
    inside = sandbox_host.run("ls", "-A", "/root").stdout.split()
    assert inside == [".bashrc", ".profile", ".ssh"]
    host_key = sandbox_host.run("cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
    assert host_key.startswith("ssh-ed25519 ")
    ours = Path("/etc/ssh/ssh_host_ed25519_key.pub")  # a controller without sshd has none to share
    assert not ours.exists() or host_key != ours.read_text()


def test_real_systemd_is_pid1_with_its_own_machine_id_and_sshd_only_on_its_address(fresh_hosts):
    a, b = fresh_hosts(2)
    assert Path(f"/proc/{a.pid}/comm").read_text().strip() == "systemd"
    assert a.run("ps", "-o", "pid=,comm=", "-p", "1").stdout.split() == ["1", "systemd"]
    assert a.systemctl("is-system-running").stdout.strip() == "running"
    assert a.systemctl("--version").stdout.startswith("systemd 252 ")
    ids = {h.run("cat", "/etc/machine-id").stdout.strip() for h in (a, b)}
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)
    listen = [ln for ln in a.run("sshd", "-T").stdout.splitlines() if ln.startswith("listenaddress ")]
    assert listen == [f"listenaddress {a.address}:22"]
    masked = a.systemctl("is-enabled", "apt-daily.timer", "apt-daily-upgrade.timer").stdout.split()
    assert masked == ["masked", "masked"]  # nothing inside reaches out


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


def test_changed_host_key_is_refused(sandbox_fleet, fresh_hosts, tmp_path):
    a, b = fresh_hosts(2)
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


def test_sglang_venv_and_docker_shim(sandbox_host):
    version = sandbox_host.run("/opt/sglang/bin/python3", "-c", "import sys; print(sys.path[1])")
    assert version.stdout.strip() == "/opt/sglang/standin"
    plain = sandbox_host.run("python3", "-c", "import sglang.launch_server as m; print(m.__file__)")
    assert plain.stdout.strip() == "/opt/sglang/standin/sglang/launch_server.py", plain.stderr
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
    port = free_port(sandbox_host.address)  # hosts share the machine's network with other sessions' servers
    sandbox_host.install_unit(
        "web.service",
        f"[Service]\nExecStart=/usr/bin/python3 -m http.server {port} "
        f"--bind {sandbox_host.address} --directory /etc/systemd/system\n",
    )
    deadline = time.monotonic() + 10
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"http://{sandbox_host.address}:{port}/web.service", timeout=1) as resp:
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
    port = free_port(host.address)
    host.set_standin(time_scale=0.001, warmup_s=1)
    host.install_unit(
        "sglang.service",
        "[Unit]\nDescription=SGLang\n[Service]\n"
        'Environment="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"\n'
        f"ExecStart={launcher} --model-path moonshotai/Kimi-K2.6 --tp 8 \\\n"
        f"  --mem-fraction-static 0.93 --chunked-prefill-size 4096 --host {host.address} --port {port}\n",
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{host.address}:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "\n".join(host.journal("sglang")[-20:])
        assert host.systemctl("is-failed", "sglang").returncode == 1, "\n".join(host.journal("sglang")[-20:])
        time.sleep(0.05)
    with urllib.request.urlopen(f"http://{host.address}:{port}/get_server_info", timeout=5) as resp:
        info = json.load(resp)
    assert "195011" in json.dumps(info)
    assert any("max_total_num_tokens=195011" in line for line in host.journal("sglang"))


def unit(exec_start: str) -> str:
    return f"[Unit]\nDescription=Test app\n\n[Service]\nExecStart={exec_start}\n"


def test_audit_records_systemctl_over_ssh_in_order(sandbox_fleet, sandbox_host):
    host = sandbox_host
    host.install_unit("app.service", unit("/bin/sleep 1001"))
    assert host.audit() == []  # set-up through SandboxHost.run is not audited
    script = "systemctl daemon-reload && systemctl reset-failed app.service && systemctl restart app.service"
    result = subprocess.run(
        ["ssh", "-F", str(sandbox_fleet.ssh_config), host.name, script], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    sudo = subprocess.run(
        [
            "ssh",
            "-F",
            str(sandbox_fleet.ssh_config),
            "-l",
            "deploy",
            host.name,
            "sudo -n systemctl show -p ActiveState --value app",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert sudo.stdout == "active\n"
    assert host.audit() == [
        "daemon-reload",
        "reset-failed app.service",
        "restart app.service",
        "show -p ActiveState --value app",
    ]


def test_service_survives_the_ssh_session(sandbox_fleet, sandbox_host):
    host = sandbox_host
    host.write("/etc/systemd/system/app.service", unit("/bin/sleep 1001"))
    started = time.monotonic()
    result = subprocess.run(
        ["ssh", "-F", str(sandbox_fleet.ssh_config), host.name, "systemctl start app"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 5  # the session does not hang on the supervisor's pipes
    assert host.systemctl("is-active", "app").stdout.strip() == "active"
