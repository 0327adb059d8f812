"""Issue 14: units read as systemd reads them — launchers, containers, the effective environment,
``${VAR}``, specifiers, NUL bytes, BOMs, unterminated quotes — and every secret form masked."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from remediate.core.probe import parse_file_header
from remediate.core.unitfile.edit import DesiredState, SourceFile, UnitSources, plan_edit
from remediate.core.unitfile.report import display_text, plan_to_dict, summary_lines, unified_diff
from remediate.core.unitfile.sources import server_args
from remediate.errors import ConfigError

NOW = datetime(2026, 11, 29, 7, 14, 22, tzinfo=UTC)
PY = "/opt/venv/bin/python3 -m sglang.launch_server --model-path /m --mem-fraction-static 0.9"
UNIT = "/etc/systemd/system/sglang.service"


def plan(text: str, env: dict[str, str | None] | None = None, name: str | None = None):  # type: ignore[no-untyped-def]
    return plan_edit(UnitSources(SourceFile(UNIT, text), (), env or {}, name), DesiredState(), now=NOW)


def new_text(text: str, env: dict[str, str | None] | None = None) -> str:
    result = plan(text, env)
    return next(f.new_text for f in result.files if f.path == UNIT)


@pytest.mark.parametrize(
    "launcher",
    [
        "/usr/bin/numactl --cpunodebind=0 --membind 0",
        "numactl -N0 -m 0 --localalloc",
        "taskset -c 0-15",
        "taskset 0xff",
        "nice -n 5",
        "nice -5",
        "ionice -c2 -n 7",
        "chrt -r 10",
        "/usr/bin/env -i PATH=/usr/bin -u X -C /tmp A=1",
        "stdbuf -oL -e L",
        "timeout -k 10 --signal=TERM 1d",
        "setpriv --reuid=1000 --regid=1000 --init-groups",
        "runuser -u sglang --",
        "conda run -n sglang --no-capture-output",
        "/opt/conda/bin/micromamba run -r /opt/mamba -n env",
        "uv run --project /srv/app --frozen",
        "poetry -C /srv/app run",
        "pipenv run",
        "sudo -u sglang -E",
        "prlimit --nofile=65536 --memlock=unlimited",
        "nohup",
        "numactl --physcpubind=0-7 taskset -c 0-7 nice -n -5",
    ],
)
def test_launchers_are_read(launcher: str) -> None:
    text = f"[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nExecStart={launcher} {PY}\n"
    if "-i " in launcher or "sudo" in launcher:
        text = text.replace("Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n", "")
        text = text.replace(launcher, launcher + " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    out = new_text(text)
    assert f"{launcher} " in out and "--mem-fraction-static 0.89 --chunked-prefill-size 4096" in out


def test_env_split_string_is_read_and_edited_inside() -> None:
    text = f'[Service]\nExecStart=/usr/bin/env -S "PYTHONUNBUFFERED=1 {PY}" --port 30001\n'
    out = new_text(text)
    assert f'-S "PYTHONUNBUFFERED=1 {PY.replace("0.9", "0.89")}" --port 30001 --chunked-prefill-size 4096' in out


def test_uv_run_module() -> None:
    text = "[Service]\nExecStart=uv run --frozen -m sglang.launch_server --mem-fraction-static 0.9\n"
    assert "-m sglang.launch_server --mem-fraction-static 0.89 --chunked-prefill-size 4096" in new_text(text)


@pytest.mark.parametrize(
    ("launcher", "named"),
    [
        ("/usr/local/bin/mywrap --x", "`mywrap`"),
        ("numactl --weird", "`numactl --weird`"),
        ("taskset -p 1", "`taskset -p`"),
        ("env -S 'x; y'", "`env -S`"),
        ("systemd-run --scope", "`systemd-run`"),
    ],
)
def test_unknown_launchers_are_refused_by_name(launcher: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        plan(f"[Service]\nExecStart={launcher} {PY}\n")
    message = str(info.value)
    assert message.startswith(UNIT + ": ") and named in message and "which remediate cannot read" in message


def test_clearing_wrappers_refuse_the_alloc_edit() -> None:
    for launcher in ("env -i", "sudo -u x", "su -l x -c"):
        tail = f"'{PY}'" if launcher.endswith("-c") else PY
        with pytest.raises(ConfigError, match="clears the environment"):
            plan(f"[Service]\nExecStart={launcher} {tail}\n")


def test_su_c_script_is_edited_inside() -> None:
    text = f"[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nExecStart=su sglang -c '{PY}'\n"
    assert "0.89 --chunked-prefill-size 4096'" in new_text(text)


def test_unset_environment_refuses() -> None:
    with pytest.raises(ConfigError, match="UnsetEnvironment= at .*:3 removes PYTORCH_CUDA_ALLOC_CONF"):
        plan(f"[Service]\nExecStart={PY}\nUnsetEnvironment=PYTORCH_CUDA_ALLOC_CONF\n")
    # NAME=VALUE removes only that exact value.
    text = (
        f"[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=x:1\nExecStart={PY}\n"
        "UnsetEnvironment=PYTORCH_CUDA_ALLOC_CONF=x:2\n"
    )
    assert "PYTORCH_CUDA_ALLOC_CONF=x:1,expandable_segments:True" in new_text(text)


def test_env_u_refuses() -> None:
    with pytest.raises(ConfigError, match="env -u PYTORCH_CUDA_ALLOC_CONF"):
        plan(f"[Service]\nExecStart=env -u PYTORCH_CUDA_ALLOC_CONF {PY}\n")


def test_script_export_wins_and_is_edited() -> None:
    text = (
        "[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
        f"ExecStart=/bin/bash -c 'export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128; exec {PY}'\n"
    )
    out = new_text(text)
    assert "export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True;" in out
    assert out.count("Environment=") == 1


def test_script_unset_refuses() -> None:
    with pytest.raises(ConfigError, match="unset PYTORCH_CUDA_ALLOC_CONF"):
        plan(f"[Service]\nExecStart=/bin/sh -c 'unset PYTORCH_CUDA_ALLOC_CONF; {PY}'\n")


@pytest.mark.parametrize("form", ["-e=NAME", "-eNAME", "--env NAME", "--env=NAME", "-e NAME"])
def test_docker_env_forms(form: str) -> None:
    env = form.replace("NAME", "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512")
    out = new_text(f"[Service]\nExecStart=/usr/bin/docker run --rm {env} img {PY}\n")
    assert out.count("PYTORCH_CUDA_ALLOC_CONF") == 1
    assert "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512,expandable_segments:True" in out


def test_docker_bash_c_is_edited_inside() -> None:
    text = f'[Service]\nExecStart=/usr/bin/docker run --rm --gpus all img bash -c "{PY} --port 30001"\n'
    out = new_text(text)
    assert "--port 30001 --chunked-prefill-size 4096" in out and "-e PYTORCH_CUDA_ALLOC_CONF=" in out
    assert "--mem-fraction-static 0.89" in out


def test_docker_unknown_option_refused() -> None:
    with pytest.raises(ConfigError, match="`docker run --frobnicate`"):
        plan(f"[Service]\nExecStart=docker run --frobnicate x img {PY}\n")


def test_docker_dash_e_name_passes_the_unit_value() -> None:
    docker = "docker run -e PYTORCH_CUDA_ALLOC_CONF img"
    text = f"[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=a:1\nExecStart={docker} {PY}\n"
    assert "Environment=PYTORCH_CUDA_ALLOC_CONF=a:1,expandable_segments:True" in new_text(text)


def test_pytorch_alloc_conf_kept_in_agreement() -> None:
    text = f"[Service]\nEnvironment=PYTORCH_ALLOC_CONF=max_split_size_mb:256\nExecStart={PY}\n"
    out = new_text(text)
    assert "Environment=PYTORCH_ALLOC_CONF=max_split_size_mb:256,expandable_segments:True\n" in out
    assert "Environment=PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256,expandable_segments:True\n" in out


def test_braced_var_is_one_word_and_dollar_var_splits() -> None:
    env = {"/etc/default/sglang": 'ARGS="--port 31000 --host 10.0.0.1"\nPORT=32000\n'}
    base = "[Service]\nEnvironmentFile=/etc/default/sglang\nExecStart=/usr/bin/python3 -m sglang.launch_server"
    sources = UnitSources(SourceFile(UNIT, f"{base} $ARGS\n"), (), env)
    assert server_args(sources) == ["--port", "31000", "--host", "10.0.0.1"]
    sources = UnitSources(SourceFile(UNIT, f"{base} ${{ARGS}} --port=${{PORT}}\n"), (), env)
    assert server_args(sources) == ["--port 31000 --host 10.0.0.1", "--port=32000"]


def test_chunk_goes_inside_the_variable() -> None:
    env = {"/etc/default/sglang": "SGLANG_ARGS=--model-path /m --mem-fraction-static 0.9\n"}
    text = (
        "[Service]\nEnvironmentFile=/etc/default/sglang\n"
        "ExecStart=/usr/bin/python3 -m sglang.launch_server $SGLANG_ARGS\n"
    )
    result = plan(text, env)
    after = {f.path: f.new_text for f in result.files}
    assert after["/etc/default/sglang"].endswith("--mem-fraction-static 0.89 --chunked-prefill-size 4096\n")
    assert "$SGLANG_ARGS\n" in after[UNIT]


def test_specifiers() -> None:
    text = (
        "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --port 300%i --api-key a%%b --model-path /m/%N\n"
    )
    sources = UnitSources(SourceFile("/etc/systemd/system/sglang@.service", text), (), {}, "sglang@7.service")
    assert server_args(sources) == ["--port", "3007", "--api-key", "a%b", "--model-path", "/m/sglang@7"]


def test_unterminated_quote_refused() -> None:
    with pytest.raises(ConfigError) as info:
        plan(f'[Service]\nExecStart={PY} --served-model-name "oops\n')
    assert str(info.value) == f'{UNIT}: ExecStart= at line 2: unterminated " quote; systemd rejects this line'


def test_nul_ends_the_line_and_is_never_printed() -> None:
    text = f"[Service]\nExecStart={PY}\0 --mem-fraction-static 0.5\n"
    result = plan(text)
    out = result.files[0].new_text
    assert out.endswith("--mem-fraction-static 0.89 --chunked-prefill-size 4096\0 --mem-fraction-static 0.5\n")
    diff = unified_diff(UNIT, text, out)
    assert "\0" not in diff and "\\x00" in diff


def test_nul_after_environment_line() -> None:
    text = f"[Service]\nEnvironment=A=1\0junk\nExecStart={PY}\n"
    out = new_text(text)
    assert "Environment=A=1\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\0junk\n" in out


def test_bom_is_skipped_and_kept() -> None:
    text = f"\ufeff[Service]\nExecStart={PY}\n"
    out = new_text(text)
    assert out.startswith("\ufeff[Service]\nEnvironment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n")


def test_file_header_with_spaces() -> None:
    header = parse_file_header("exists=1 sha256=ab mode=644 uid=0 gid=0 size=3 path=/etc/systemd/system/a b.service")
    assert header["path"] == "/etc/systemd/system/a b.service" and header["size"] == "3"
    assert parse_file_header("path=/x y exists=0") == {"path": "/x y", "exists": "0"}


SECRET_FORMS = [
    ('--api-key "sk-quoted-1"', "sk-quoted-1"),
    ("--api-key=sk-eq-2", "sk-eq-2"),
    ("--api-key 'sk-single-3'", "sk-single-3"),
    ("--hf-token hf_flag_4", "hf_flag_4"),
]


@pytest.mark.parametrize(("form", "secret"), SECRET_FORMS)
def test_secret_flags_masked_everywhere(form: str, secret: str) -> None:
    text = f"[Service]\nExecStart={PY} {form}\n"
    result = plan(text)
    shown = [unified_diff(f.path, f.old_text, f.new_text) for f in result.files]
    shown += [str(plan_to_dict(result)), *summary_lines(result)]
    assert all(secret not in s for s in shown)


@pytest.mark.parametrize(
    "text",
    [
        "ExecStart=/bin/bash -c 'exec python3 -m sglang.launch_server --api-key=\\'SEKRIT\\' --port 1'",
        "Environment=HTTPS_PROXY=http://user:SEKRIT@proxy:3128",
        "ExecStart=docker run -eHF_TOKEN=SEKRIT img",
        "ExecStart=docker run -e=HF_TOKEN=SEKRIT --env=OPENAI_API_KEY=SEKRIT --env DB_PASSWORD=SEKRIT img",
        'Environment="HF_TOKEN=SEKRIT with space" MY_SECRET=SEKRIT',
        "HUGGING_FACE_HUB_TOKEN='SEKRIT'",
        "export AWS_SECRET_ACCESS_KEY=SEKRIT; exec x",
        "--api-key \\\n    SEKRIT \\",
        "--admin-api-key SEKRIT",
    ],
)
def test_mask_forms(text: str) -> None:
    assert "SEKRIT" not in display_text(text)
