"""What is verified on a real host: the container's published port, the running server's environment,
a running server that lacks the unit's settings (drift), and a --probe that fails without a crash."""

from __future__ import annotations

import pytest

from tests.support.node import UNIT_PATH, Node

pytestmark = pytest.mark.e2e

ALLOC = "PYTORCH_CUDA_ALLOC_CONF"
PYTHON = "/opt/sglang/bin/python3"  # the sandbox venv's interpreter (a sh wrapper, sandbox/image.py)
CONTAINER_PORT = 30000  # inside the container; the shim emulates -p by moving the server to the host port


def _docker_unit(node: Node, publish: str) -> str:
    return (
        "[Unit]\nDescription=SGLang in docker, published\n\n[Service]\n"
        "ExecStart=/usr/local/bin/docker run --rm --gpus all --name sglang --ipc=host "
        f"{publish} lmsysorg/sglang:v0.5.6 \\\n"
        "    python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 --trust-remote-code \\\n"
        f"    --host 0.0.0.0 --port {CONTAINER_PORT} --mem-fraction-static 0.94\n"
        "ExecStop=/usr/local/bin/docker stop sglang\n"
    )


def test_docker_published_port_is_where_the_wait_status_and_bench_look(node: Node) -> None:
    node.install(_docker_unit(node, f"-p {node.host.address}:{node.port}:{CONTAINER_PORT}"))

    run = node.cli("oom", "--wait-timeout", "30")

    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert run.result["max_total_num_tokens"] == 195011
    assert "--mem-fraction-static 0.93" in node.host.read(UNIT_PATH)
    assert node.server_env().get(ALLOC) == "expandable_segments:True"
    status = node.cli("status")
    assert status.returncode == 0, status
    assert status.result["max_total_num_tokens"] == 195011, status
    # bench too: nothing listens on the container's port on the host, only the published one answers
    bench = node.cli("bench", "--contexts", "1k", "--gen", "2")
    assert bench.returncode == 0, bench
    assert bench.result["endpoint"] == f"{node.host.address}:{node.port}", bench
    assert [p["status"] for p in bench.result["points"]] == ["ok"], bench


def test_docker_without_a_published_port_fails_early_with_one_line(node: Node) -> None:
    unit = (
        _docker_unit(node, "")
        .replace("--host 0.0.0.0", f"--host {node.host.address}")
        .replace(f"--port {CONTAINER_PORT}", f"--port {node.port}")
    )
    node.install(unit)
    before = node.sha(UNIT_PATH)

    run = node.cli("oom", "--wait-timeout", "30", json_out=False)

    assert run.returncode == 2, run
    assert f"the server's port {node.port} in the container is not published" in run.stdout + run.stderr, run
    assert node.sha(UNIT_PATH) == before, "nothing may be written"
    assert node.backups(UNIT_PATH) == []


def _alloc_line(text: str) -> str:
    (line,) = [line for line in text.splitlines(keepends=True) if ALLOC in line]
    return line


def test_a_server_reloaded_but_never_restarted_is_drift_and_oom_restarts_it(incident: Node) -> None:
    node = incident
    first = node.cli("oom", "--wait-timeout", "30")
    assert first.returncode == 0 and first.result["outcome"] == "remediated", first
    remediated = node.host.read(UNIT_PATH)
    # The server restarted without the alloc conf, then the right unit was put back and reloaded, not restarted.
    node.install(remediated.replace(_alloc_line(remediated), ""), start=False)
    assert node.host.systemctl("restart", "sglang.service").returncode == 0
    node.wait_healthy()
    node.host.write(UNIT_PATH, remediated, mode=0o640)
    node.host.systemctl("daemon-reload", check=True)
    assert ALLOC not in node.server_env()
    pid = node.show("MainPID")["MainPID"]

    status = node.cli("status")
    assert status.returncode == 0 and status.result["outcome"] == "drift", status
    assert status.result["remediated"] is True, "the unit is right"

    dry = node.cli("oom", "--dry-run")

    assert dry.returncode == 0, dry
    assert dry.result["outcome"] == "drift", dry
    assert dry.result["drift"] == [
        f"the running server's {ALLOC} is unset (/proc/{pid}/environ): it lacks expandable_segments:True"
    ]
    assert any(f"`remediate oom {node.host.name}` restarts it" in n for n in dry.result["notes"]), dry
    assert node.show("MainPID")["MainPID"] == pid, "a dry run restarts nothing"

    run = node.cli("oom", "--wait-timeout", "30")

    assert run.returncode == 0, run
    assert run.result["outcome"] == "drift", run
    assert node.host.read(UNIT_PATH) == remediated, "the unit was right: nothing is written"
    assert node.show("MainPID")["MainPID"] != pid
    assert node.server_env().get(ALLOC) == "expandable_segments:True"
    again = node.cli("oom", "--wait-timeout", "30")
    assert again.returncode == 0 and again.result["outcome"] == "unchanged", again


def test_a_server_whose_environment_lacks_the_alloc_conf_is_rolled_back(incident: Node) -> None:
    """The unit is edited right and the flags arrive, but the allocator variable does not (here: the venv's
    interpreter is a wrapper that resets it, as an entrypoint script can): only the server's environ shows
    it, and the change is rolled back instead of reported as remediated."""
    node = incident
    original = node.bytes(UNIT_PATH)
    wrapper = node.host.read(PYTHON)
    node.host.write(PYTHON, wrapper.replace("exec ", f"unset {ALLOC}\nexec ", 1), mode=0o755)

    run = node.cli("oom", "--wait-timeout", "30")

    assert run.returncode == 1, run
    assert run.result["outcome"] == "rolled_back", run
    assert f"the running server's {ALLOC} is unset (/proc/" in run.result["error"], run
    assert "it lacks expandable_segments:True" in run.result["error"], run
    assert node.bytes(UNIT_PATH) == original
    node.wait_healthy()


def test_the_environment_is_read_from_the_sglang_process_not_a_shell_that_did_not_exec(node: Node) -> None:
    """`bash -c 'export …; python …; echo …'` (python not last, so bash cannot exec it): MainPID is bash,
    whose environ never shows its exports; the python under it is the process whose environment counts."""
    unit = (
        "[Unit]\nDescription=sglang under a shell\n\n[Service]\n"
        f"ExecStart=/bin/bash -c 'export {ALLOC}=max_split_size_mb:512; /opt/sglang/bin/python3 -m "
        "sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 --trust-remote-code "
        f"--host {node.host.address} --port {node.port} --mem-fraction-static 0.94; echo sglang exited'\n"
    )
    node.install(unit)

    run = node.cli("oom", "--wait-timeout", "30")

    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert f"export {ALLOC}=max_split_size_mb:512,expandable_segments:True;" in node.host.read(UNIT_PATH)


def test_a_probe_the_new_server_rejects_for_its_length_is_a_warning_not_a_rollback(incident: Node) -> None:
    """200,000 tokens fit the context (262,144) but not the smaller pool after the change (the longest
    prompt is now 195,005): the server lives, so the verified change stays and the probe is a warning."""
    node = incident

    run = node.cli("oom", "--wait-timeout", "30", "--probe", "200000")

    assert run.returncode == 0, run
    assert run.result["outcome"] == "remediated", run
    assert run.result["probe"]["ok"] is False, run.result["probe"]
    assert any("--probe 200,000 failed but the server did not crash" in w for w in run.result["warnings"]), run
    assert "--mem-fraction-static 0.93" in node.host.read(UNIT_PATH)
    assert node.backups(UNIT_PATH), "the change stays"
