"""The host's read of a unit's --config YAML (templates/probe.sh.j2's ``@@configs``, host/probe.py): the sources the
core plans from, and the vLLM command line the plan and the health wait read."""

from __future__ import annotations

from remediate.core.probe import ProbeResult, parse_probe
from remediate.host.common.options import RunOptions
from remediate.host.common.probe import endpoint_of, sources_from_probe
from remediate.host.plan.budget_vllm import vllm_args
from tests.support.fake_transport import exec_start_value, probe_output

UNIT = "vllm.service"
PATH = f"/etc/systemd/system/{UNIT}"
YAML = "/etc/vllm/m.yaml"


def _found(argv: tuple[str, ...], yaml_text: str | None) -> ProbeResult:
    props = {"FragmentPath": PATH, "DropInPaths": "", "ExecStart": exec_start_value(argv)}
    out = probe_output(UNIT, props, {PATH: "[Service]\nExecStart=" + " ".join(argv) + "\n", YAML: yaml_text})
    return parse_probe(out.replace("@@end\n", f"@@configs {YAML}\n@@end\n", 1), UNIT)


def test_the_yaml_goes_to_the_config_files_not_the_environment_files() -> None:
    argv = ("/usr/bin/vllm", "serve", "m", "--config", YAML)
    found = _found(argv, "gpu_memory_utilization: 0.93\nport: 8011\n")
    sources = sources_from_probe(found)
    assert YAML not in (sources.env_files or {})
    read = (sources.config_files or {})[YAML]
    assert read is not None and read.data == {"gpu_memory_utilization": 0.93, "port": 8011}


def test_vllm_args_take_the_yaml_under_the_command_line() -> None:
    found = _found(
        ("/usr/bin/vllm", "serve", "m", "--config", YAML, "--port", "8001"),
        "gpu_memory_utilization: 0.93\nport: 8011\n",
    )
    args = vllm_args(found)
    assert args is not None and args.config_read
    assert args.value("gpu-memory-utilization") == "0.93" and args.owner("gpu-memory-utilization") == f"--config {YAML}"
    assert args.value("port") == "8001"  # the command line wins
    missing = vllm_args(_found(("/usr/bin/vllm", "serve", "m", "--config", YAML), None))
    assert missing is not None and missing.owner("gpu-memory-utilization") == f"--config {YAML} (not read)"


def test_the_endpoint_is_the_yamls_port_unless_the_command_line_names_one() -> None:
    """oom's health wait, status and --probe ask where the server listens: a port set only in the YAML is it."""
    yaml_port = _found(("/usr/bin/vllm", "serve", "m", "--config", YAML), "port: 8011\n")
    assert endpoint_of(yaml_port, RunOptions()) == ("127.0.0.1", 8011)
    both = _found(("/usr/bin/vllm", "serve", "m", "--config", YAML, "--port", "8001"), "port: 8011\n")
    assert endpoint_of(both, RunOptions()) == ("127.0.0.1", 8001)
    unread = _found(("/usr/bin/vllm", "serve", "m", "--config", YAML), None)
    assert endpoint_of(unread, RunOptions()) == ("127.0.0.1", 8000)  # no file: vLLM's default port
