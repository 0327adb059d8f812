"""#36 on sandbox hosts: sglang 0.5.23 units (options in a --config YAML, the stated floor, a removed flag,
Mooncake over EFA) and vLLM units (the 0.50 host without cache memory, a KV cache sized in bytes)."""

from __future__ import annotations

import pytest

from sandbox.units import incident_unit
from tests.support.node import UNIT, UNIT_PATH, Node, poll

pytestmark = pytest.mark.e2e

YAML_PATH = "/etc/sglang/k26.yaml"
V23 = "Environment=SGLANG_STANDIN_VERSION=0.5.23\n"
CHANGING = ("daemon-reload", "reset-failed", "restart", "start", "stop")


def _changing(audit: list[str]) -> list[str]:
    return [line for line in audit if line.split(" ", 1)[0] in CHANGING]


def _v23(text: str) -> str:
    """The incident's unit on sglang 0.5.23 (the stand-in's version from the unit's environment)."""
    return text.replace("Environment=CUDA_HOME=/usr/local/cuda\n", "Environment=CUDA_HOME=/usr/local/cuda\n" + V23)


def _yaml_unit(node: Node) -> str:
    """The incident's unit with its options in a --config YAML: the command line keeps only where it listens."""
    text = _v23(incident_unit(node.host.address, node.port))
    head, _, rest = text.partition("ExecStart=")
    tail = rest[rest.index("\nRestart=") :]
    return (
        f"{head}ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server --config {YAML_PATH} \\\n"
        f"    --host {node.host.address} --port {node.port}{tail}"
    )


YAML = (
    "# sglang 0.5.23 options (ConfigArgumentMerger: merged before the command line)\n"
    "model-path: /models/Kimi-K2.6\n"
    "tp-size: 8\n"
    "mem-fraction-static: 0.94\n"
    "trust-remote-code: true\n"
)


def test_a_fraction_in_the_config_yaml_crashes_on_32k_and_oom_fixes_it(node: Node) -> None:
    node.host.write(YAML_PATH, YAML, mode=0o644)
    node.install(_yaml_unit(node))
    original, yaml_bytes = node.bytes(UNIT_PATH), node.bytes(YAML_PATH)
    assert node.server_info()["mem_fraction_static"] == 0.94  # the stand-in read it from the YAML

    status = node.cli("status")
    assert status.returncode == 0, status
    assert status.result["flags"]["before"]["mem_fraction_static"] == "0.94"
    assert (
        f"--config {YAML_PATH} sets mem-fraction-static 0.94; the command line wins over it" in (status.result["notes"])
    )

    for seed in (1, 2):
        assert node.generate(2000, seed).status == 200
    assert node.generate(32768, 3).status is None, "the 32k prefill should crash the 0.94 server"
    poll(lambda: any("OutOfMemoryError" in line for line in node.journal()), deadline=10, what="the OOM")

    plan = node.cli("plan")
    assert plan.returncode == 0, plan
    assert any(YAML_PATH in note for note in plan.result["notes"]), plan.result["notes"]

    run = node.cli("oom", "--wait-timeout", "60")
    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated", result
    assert result["max_total_num_tokens"] == 195011
    assert result["flags"]["before"] == {"mem_fraction_static": "0.94", "chunked_prefill_size": None}
    assert result["flags"]["after"] == {"mem_fraction_static": "0.93", "chunked_prefill_size": "4096"}
    assert f"mem-fraction-static 0.94->0.93 (from --config {YAML_PATH})" in result["diff"]  # the YAML's value named
    assert f"+    --host {node.host.address} --port {node.port} --mem-fraction-static 0.93" in result["diff"]
    assert node.bytes(YAML_PATH) == yaml_bytes, "the YAML is never written"
    argv = node.server_argv()
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.93"
    assert node.server_info()["max_total_num_tokens"] == 195011
    assert node.generate(32768, 13, max_new_tokens=2).status == 200

    back = node.cli("rollback", "--wait-timeout", "60")
    assert back.returncode == 0 and back.result["outcome"] == "restored", back
    assert node.bytes(UNIT_PATH) == original and node.bytes(YAML_PATH) == yaml_bytes
    assert node.server_info()["mem_fraction_static"] == 0.94


def test_0523_stated_floor_gets_diagnose_above_it_and_oom_refused(node: Node) -> None:
    text = _v23(incident_unit(node.host.address, node.port)).replace(
        "--mem-fraction-static 0.94", "--mem-fraction-static 0.75"
    )
    node.install(text, start=False)
    assert node.host.systemctl("start", UNIT).returncode == 0
    poll(lambda: any("minimum viable" in line for line in node.journal()), deadline=20, what="the floor line")

    why = node.cli("diagnose")
    assert why.returncode == 0, why
    rec = why.result["recommendation"]
    assert rec["blocking"] is True and rec["mem_fraction_static"] > 0.791, rec  # "Raise … above 0.791"

    original = node.bytes(UNIT_PATH)
    refused = node.cli("oom", "--timeout", "30")
    assert refused.returncode == 1, refused
    assert "refusing the OOM recipe" in refused.result["error"] and "--force" in refused.result["error"]
    assert node.bytes(UNIT_PATH) == original and node.backups(UNIT_PATH) == []


@pytest.mark.parametrize(
    ("flag", "said"),
    [("--cuda-graph-max-bs 64", "ambiguous option"), ("--stream-output", "unrecognized arguments")],
    ids=["split", "removed"],
)
def test_0523_unit_with_a_removed_flag_fails_at_startup_and_diagnose_names_it(node: Node, flag: str, said: str) -> None:
    text = _v23(incident_unit(node.host.address, node.port)).replace(
        "--trust-remote-code", f"--trust-remote-code {flag}"
    )
    node.install(text, start=False)
    assert node.host.systemctl("start", UNIT).returncode == 0
    poll(lambda: any(said in line for line in node.journal()), deadline=20, what="argparse's exit 2")

    why = node.cli("diagnose")
    assert why.returncode == 0, why
    name = flag.split()[0]
    [finding] = [f for f in why.result["findings"] if f["kind"] == "invalid_server_argument"]
    assert name in str(finding), finding
    rec = why.result["recommendation"]
    assert rec["blocking"] is True and name in "\n".join(rec["reasons"]), rec


def test_mooncake_over_efa_gets_the_recipe_without_expandable_segments(node: Node) -> None:
    text = _v23(incident_unit(node.host.address, node.port))
    text = text.replace(V23, V23 + "Environment=MOONCAKE_PROTOCOL=efa\n").replace(
        "--trust-remote-code", "--trust-remote-code --disaggregation-mode prefill"
    )
    node.install(text)
    audit = node.audit()

    run = node.cli("oom", "--wait-timeout", "60")
    assert run.returncode == 0, run
    result = run.result
    assert result["outcome"] == "remediated", result
    assert result["env"]["after"] == {"PYTORCH_CUDA_ALLOC_CONF": None}
    assert "expandable_segments" not in node.host.read(UNIT_PATH)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in node.server_env()
    assert node.healthy() and _changing(node.audit()[len(audit) :])[-1] == f"restart {UNIT}"
    assert not [line for line in node.journal() if "incompatible with MOONCAKE_PROTOCOL=efa" in line]


VLLM_UNIT = "vllm.service"
VLLM_PATH = f"/etc/systemd/system/{VLLM_UNIT}"


def _vllm_unit(node: Node, flags: str) -> str:
    return (
        "[Unit]\nDescription=vLLM server (stand-in)\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model standin/mha-13b-40k \\\n"
        f"    --host {node.host.address} --port {node.port} {flags}\n"
    )


def test_vllm_host_at_half_without_cache_memory_gets_a_number_above_it(node: Node) -> None:
    node.host.set_standin(time_scale=0.001, weights_gib=38.0)  # a bigger model: 0.50 leaves no cache memory
    node.install(_vllm_unit(node, "--gpu-memory-utilization 0.50"), name=VLLM_UNIT, start=False)
    assert node.host.systemctl("start", VLLM_UNIT).returncode == 0
    poll(
        lambda: any("No available memory for the cache blocks" in line for line in node.journal(VLLM_UNIT)),
        deadline=20,
        what="vLLM's startup failure",
    )
    why = node.cli("diagnose", "--unit", VLLM_UNIT)
    assert why.returncode == 0, why
    rec = why.result["recommendation"]
    assert rec["kind"] == "no-cache-memory" and rec["blocking"] is True, rec
    assert float(rec["other_flags"]["--gpu-memory-utilization"]) > 0.50, rec  # a number, from the card's total
    assert any("(nvidia-smi)" in reason for reason in rec["reasons"]), rec["reasons"]


def test_vllm_unit_sized_in_bytes_is_refused_in_one_line(node: Node) -> None:
    node.install(_vllm_unit(node, "--kv-cache-memory-bytes 34359738368"), name=VLLM_UNIT)
    original = node.bytes(VLLM_PATH)
    refused = node.cli("oom", "--unit", VLLM_UNIT, "--wait-timeout", "30")
    assert refused.returncode != 0, refused
    error = refused.result["error"]
    assert "--kv-cache-memory-bytes" in error and "\n" not in error
    assert node.bytes(VLLM_PATH) == original and node.backups(VLLM_PATH) == []
    planned = node.cli("plan", "--unit", VLLM_UNIT)
    assert planned.returncode == 0 and planned.result["plan"]["rows"] == [], planned
    [note] = [n for n in planned.result["notes"] if n.startswith("--kv-cache-memory-bytes 34359738368 sizes the KV")]
    assert "ignores --gpu-memory-utilization" in note and "\n" not in note


def test_0523_on_rocm_the_scaled_fraction_is_verified_and_named_not_rolled_back(node: Node) -> None:
    """sglang 0.5.23 on ROCm (aiter, Kimi's 262,144 context) runs the unit's 0.95 as 0.95 x 0.85 (arg_groups/
    attention_hook.py): oom verifies that value instead of rolling back, and status names the factor."""
    node.host.set_standin(time_scale=0.001, platform="rocm")
    node.install(_v23(incident_unit(node.host.address, node.port)))

    run = node.cli("oom", "--mem-fraction-static", "0.95", "--wait-timeout", "30")

    assert run.returncode == 0 and run.result["outcome"] == "remediated", run
    assert any("--mem-fraction-static 0.95 as 0.8075" in n and "aiter" in n for n in run.result["notes"]), run
    assert not any("logged a KV pool" in w for w in run.result["warnings"]), run  # the journal agrees
    status = node.cli("status")
    assert status.returncode == 0 and status.result["outcome"] == "unchanged", status
    assert any("as 0.8075" in n for n in status.result["notes"]), status


def test_vllm_status_reads_the_pool_from_metrics_when_the_journal_lost_its_line(node: Node) -> None:
    node.host.set_standin(time_scale=0.001, capacity_line=False)  # the "GPU KV cache size" line never logged
    node.install(_vllm_unit(node, "--gpu-memory-utilization 0.94"), name=VLLM_UNIT)
    assert not any("GPU KV cache size" in line for line in node.journal(VLLM_UNIT))
    status = node.cli("status", "--unit", VLLM_UNIT)
    assert status.returncode == 0, status
    tokens = status.result["max_total_num_tokens"]  # vllm:cache_config_info num_gpu_blocks x block_size
    assert isinstance(tokens, int) and tokens > 0 and tokens % 16 == 0, status
