"""Each value is remediated where it really lives: a drop-in, an EnvironmentFile, a docker -e."""

from __future__ import annotations

import pytest

from tests.support.node import UNIT_PATH, Node, incident_unit

pytestmark = pytest.mark.e2e

DROPIN = "/etc/systemd/system/sglang.service.d/override.conf"
ENV_FILE = "/etc/default/sglang"
ALLOC = "PYTORCH_CUDA_ALLOC_CONF"


def _remediate(node: Node) -> dict:
    run = node.cli("oom", "--wait-timeout", "60")
    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated", run
    assert result["max_total_num_tokens"] == 195011
    return result


def _running(node: Node, *, alloc: str = "expandable_segments:True") -> list[str]:
    """The new server is up with 195,011 tokens and the alloc conf; returns its argv."""
    assert node.show("ActiveState")["ActiveState"] == "active"
    info = node.server_info()
    assert info["max_total_num_tokens"] == 195011 and info["chunked_prefill_size"] == 4096
    assert node.server_env().get(ALLOC) == alloc
    argv = node.server_argv()
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.93"
    assert argv[argv.index("--chunked-prefill-size") + 1] == "4096"
    return argv


def test_dropin_that_overrides_execstart_is_edited_not_the_fragment(node: Node) -> None:
    fragment = incident_unit(node.host.address, node.port)
    dropin = (
        "[Service]\n"
        "ExecStart=\n"
        "ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 "
        f"--host {node.host.address} --port {node.port} --mem-fraction-static 0.94 --trust-remote-code\n"
    )
    node.host.write(DROPIN, dropin)
    node.install(fragment)
    assert node.show("DropInPaths")["DropInPaths"] == DROPIN
    fragment_sha = node.sha(UNIT_PATH)

    result = _remediate(node)

    assert node.sha(UNIT_PATH) == fragment_sha, "the fragment's ExecStart is dead: it must not be edited"
    assert node.backups(UNIT_PATH) == []
    (backup,) = node.backups(DROPIN)
    assert node.host.read(backup) == dropin
    text = node.host.read(DROPIN)
    assert "--mem-fraction-static 0.93 --chunked-prefill-size 4096" in text or (
        "--mem-fraction-static 0.93" in text and "--chunked-prefill-size 4096" in text
    )
    assert "ExecStart=\n" in text, "the ExecStart= reset must stay"
    assert result["backup"] == backup
    _running(node)


def test_environment_file_args_are_edited_in_the_environment_file(node: Node) -> None:
    env_text = (
        "# sglang arguments (read by sglang.service)\n"
        'SGLANG_ARGS="--model-path /models/Kimi-K2.6 --tp 8 --trust-remote-code '
        f'--host {node.host.address} --port {node.port} --mem-fraction-static 0.94"\n'
    )
    unit = (
        "[Unit]\nDescription=SGLang server\n\n[Service]\n"
        f"EnvironmentFile={ENV_FILE}\n"
        "ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server $SGLANG_ARGS\n"
        "Restart=on-failure\n"
    )
    node.host.write(ENV_FILE, env_text, mode=0o600)
    node.install(unit)

    _remediate(node)

    env_after = node.host.read(ENV_FILE)
    assert "--mem-fraction-static 0.93" in env_after and '0.94"' not in env_after
    assert node.mode(ENV_FILE) == 0o600
    (env_backup,) = node.backups(ENV_FILE)
    assert node.host.read(env_backup) == env_text and node.mode(env_backup) == 0o600
    unit_after = node.host.read(UNIT_PATH)
    assert "--mem-fraction-static" not in unit_after, "the fraction lives in the EnvironmentFile"
    assert "$SGLANG_ARGS" in unit_after
    _running(node)


def test_environment_file_alloc_conf_is_extended_in_the_environment_file(node: Node) -> None:
    env_text = "NCCL_DEBUG=WARN\nPYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512\n"
    node.host.write(ENV_FILE, env_text)
    unit = incident_unit(node.host.address, node.port).replace(
        "Environment=CUDA_HOME=/usr/local/cuda\n",
        f"Environment=CUDA_HOME=/usr/local/cuda\nEnvironmentFile={ENV_FILE}\n",
    )
    node.install(unit)
    assert node.server_env()[ALLOC] == "max_split_size_mb:512"

    _remediate(node)

    assert node.host.read(ENV_FILE) == env_text.replace("512\n", "512,expandable_segments:True\n")
    unit_after = node.host.read(UNIT_PATH)
    assert ALLOC not in unit_after, "the EnvironmentFile owns the variable (it would override Environment=)"
    assert "--mem-fraction-static 0.93" in unit_after and "--chunked-prefill-size 4096" in unit_after
    _running(node, alloc="max_split_size_mb:512,expandable_segments:True")


def test_docker_wrapped_unit_gets_a_docker_env_option(node: Node) -> None:
    unit = (
        "[Unit]\nDescription=SGLang in docker\n\n[Service]\n"
        "Environment=CUDA_HOME=/usr/local/cuda\n"
        "ExecStartPre=-/usr/local/bin/docker rm -f sglang\n"
        "ExecStart=/usr/local/bin/docker run --rm --gpus all --name sglang --ipc=host --network host \\\n"
        "    -e HF_HOME=/models/.cache/huggingface \\\n"
        "    lmsysorg/sglang:v0.5.6 \\\n"
        "    python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 --trust-remote-code \\\n"
        f"    --host {node.host.address} --port {node.port} --mem-fraction-static 0.94\n"
        "ExecStop=/usr/local/bin/docker stop sglang\n"
        "Restart=on-failure\n"
    )
    node.install(unit)
    assert ALLOC not in node.server_env()

    result = _remediate(node)

    text = node.host.read(UNIT_PATH)
    assert "-e PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert "Environment=PYTORCH_CUDA_ALLOC_CONF" not in text, "a host Environment= does not reach the container"
    assert "--mem-fraction-static 0.93" in text and "--chunked-prefill-size 4096" in text
    assert node.host.read(result["backup"]) == unit
    argv = _running(node)
    assert "sglang.launch_server" in argv


def test_dropin_in_a_new_directory_not_loaded_yet_is_the_one_edited(node: Node) -> None:
    """Real systemd 252: a drop-in written into a *new* UNIT.d directory leaves NeedDaemonReload=no and
    DropInPaths empty until units are next loaded; the transaction's daemon-reload loads it, so the plan
    must read it from disk (editing the fragment's ExecStart would be dead on arrival)."""
    fragment = incident_unit(node.host.address, node.port)
    node.install(fragment)
    fragment_sha = node.sha(UNIT_PATH)
    dropin = (
        "[Service]\n"
        "ExecStart=\n"
        "ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 "
        f"--host {node.host.address} --port {node.port} --mem-fraction-static 0.94\n"
    )
    node.host.write(DROPIN, dropin)
    assert node.show("NeedDaemonReload", "DropInPaths") == {"NeedDaemonReload": "no", "DropInPaths": ""}

    status = node.cli("status")
    assert status.returncode == 0, status
    assert any("drop-in not loaded yet" in w and DROPIN in w for w in status.result["warnings"]), status
    result = _remediate(node)

    assert node.sha(UNIT_PATH) == fragment_sha, "the fragment's ExecStart is reset by the drop-in"
    (backup,) = node.backups(DROPIN)
    assert node.host.read(backup) == dropin and result["backup"] == backup
    assert "--mem-fraction-static 0.93" in node.host.read(DROPIN)
    assert node.show("DropInPaths")["DropInPaths"] == DROPIN
    _running(node)
