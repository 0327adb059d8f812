"""Issue 14 through the runner and the API (and what the CLI prints of it, via render) with a FakeTransport:
the health wait polls the address the expanded command line names, and no secret of the unit or the
journal reaches any output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediate import api
from remediate.fleet.request import OomRequest
from tests.support import hosts
from tests.support.fake_transport import FakeTransport, state_output
from tests.support.hosts import incident_host
from tests.support.output import printed as _printed

ENV_PATH = "/etc/default/sglang"
ENV_UNIT = (
    "[Service]\nEnvironmentFile=/etc/default/sglang\n"
    "ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server $SGLANG_ARGS\n"
)
ENV_FILE = 'SGLANG_ARGS="--model-path /models/m --host 127.0.0.2 --port 31000 --mem-fraction-static 0.94"\n'
SECRETS = ["sk-live-Quoted1", "sk-live-Escaped2", "ProxyPass3", "hf_Attached4", "sk-live-Journal5", "hf_Env6"]
SECRET_UNIT = (
    "[Service]\n"
    "Environment=HTTPS_PROXY=http://svc:ProxyPass3@proxy.example:3128 HF_TOKEN=hf_Env6\n"
    "ExecStart=/bin/bash -c 'exec /opt/sglang/bin/python3 -m sglang.launch_server --model-path /m "
    "--mem-fraction-static 0.94 --api-key \"sk-live-Quoted1\" --admin-api-key=\\'sk-live-Escaped2\\''\n"
    "ExecStartPost=/usr/bin/docker run --rm -eHF_TOKEN=hf_Attached4 img true\n"
)
JOURNAL = (
    "server_args=ServerArgs(model_path='/m', api_key='sk-live-Journal5', mem_fraction_static=0.93)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
)


def _env_host() -> FakeTransport:
    argv = ["/opt/sglang/bin/python3", "-m", "sglang.launch_server", "$SGLANG_ARGS"]
    environment_files = f"{ENV_PATH} (ignore_errors=no)"
    return incident_host(
        text=ENV_UNIT, argv=argv, files={ENV_PATH: ENV_FILE}, journal="\n", EnvironmentFiles=environment_files
    )


def test_health_wait_polls_the_address_in_the_environment_file() -> None:
    host = _env_host()
    host.on(hosts.COMMIT, hosts.commit_ok())
    host.on(hosts.POLL, state_output(invocation_id="inv-2"))
    host.http("/health", 200)
    host.http("/server_info", (200, json.dumps({"max_total_num_tokens": 190000, "mem_fraction_static": 0.93,
                                                 "chunked_prefill_size": 4096})))  # fmt: skip
    result = hosts.run_oom(host)
    assert result.outcome == "remediated", result.error
    assert {(call.host, call.port) for call in host.http_calls} == {("127.0.0.2", 31000)}
    [script] = host.scripts("# remediate commit")
    written = hosts.written_texts(script)
    assert '--mem-fraction-static 0.93 --chunked-prefill-size 4096"' in written[ENV_PATH]
    assert written[hosts.UNIT_PATH].endswith("$SGLANG_ARGS\n")


def _secret_host() -> FakeTransport:
    fake = hosts.serving_host(SECRET_UNIT)
    fake.on(r"\Ajournalctl", JOURNAL)
    return fake


def test_dry_run_and_status_never_print_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rollout = api.remediate_oom(
        OomRequest(targets=("root@gpu-01",), dry_run=True), transport_factory=hosts.OneHost(_secret_host())
    )
    shown = _printed(rollout.results, dry_run=True)
    assert '--api-key "***"' in shown and "HTTPS_PROXY=http://svc:***@proxy.example:3128" in shown
    status = api.status(api.StatusRequest(targets=("root@gpu-01",)), transport_factory=hosts.OneHost(_secret_host()))
    shown += _printed(status, dry_run=False, table=True)
    for secret in SECRETS:
        assert secret not in shown


def test_failed_run_masks_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real (fake-host) run whose new server dies: the journal tail is shown, its api_key masked."""
    monkeypatch.chdir(tmp_path)
    fake = _secret_host()
    fake.on(hosts.COMMIT, hosts.commit_ok(), hosts.commit_ok(invocation="inv-3"))
    fake.on(hosts.POLL, state_output("failed", "failed", result="exit-code", invocation_id="inv-2", main_pid=0))
    rollout = api.remediate_oom(
        OomRequest(targets=("root@gpu-01",), rollback=False), transport_factory=hosts.OneHost(fake)
    )
    [result] = rollout.results
    assert result.outcome == "failed" and result.journal
    shown = _printed(rollout.results, dry_run=False)
    assert "journal │ server_args=ServerArgs(model_path='/m', api_key='***'" in shown, shown
    for secret in SECRETS:
        assert secret not in shown
