"""A server's --config YAML read as its engine merges it (core/unitfile/config.py), on the engines' own examples:
sglang 0.5.23 srt/utils/server_args_config_parser.py ``ConfigArgumentMerger``, vLLM's
``FlexibleArgumentParser._pull_args_from_config`` / ``load_config_file`` (vllm/utils/argparse_utils.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from remediate.core.engines import SGLANG, VLLM
from remediate.core.probe import parse_probe
from remediate.core.unitfile.config import ConfigRead, config_words, named_config
from remediate.core.unitfile.edit import DesiredState, SourceFile, UnitSources, plan_edit, read_settings
from remediate.core.unitfile.sources import config_notes, load_service
from remediate.errors import ConfigError
from remediate.host.common.probe import MAX_CONFIG_BYTES, load_config


def load_yaml(text: str, path: str) -> object:
    """The mapping the host's read gives, or its one line raised as the core raises it."""
    read = load_config(text, path)
    if read.error is not None:
        raise ConfigError(read.error, source=path)
    return read.data


NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
FRAGMENT = "/etc/systemd/system/sglang.service"


def _words(text: str, engine: str = "sglang") -> list[str]:
    eng = SGLANG if engine == "sglang" else VLLM
    data = load_config(text, "/c.yaml").data
    assert data is not None
    words, _ = config_words(data, eng)
    return [w.text for w in words]


def _sources(exec_start: str, configs: dict[str, str | None] | None) -> UnitSources:
    read: dict[str, ConfigRead | None] | None = None
    if configs is not None:
        read = {path: load_config(text, path) if text is not None else None for path, text in configs.items()}
    return UnitSources(SourceFile(FRAGMENT, f"[Service]\nExecStart={exec_start}\n"), (), {}, None, read)


def test_only_the_exact_word_names_the_file() -> None:
    # merge_config_with_args / _pull_args_from_config: `"--config" in args`; --config=FILE is never read.
    assert named_config(["--port", "1", "--config", "/etc/c.yaml"]) == (2, "/etc/c.yaml")
    assert named_config(["--config=/etc/c.yaml"]) is None
    with pytest.raises(ConfigError, match="names --config twice"):  # "Multiple config files specified!"
        named_config(["--config", "a.yaml", "--config", "b.yaml"])
    with pytest.raises(ConfigError, match="ends with --config"):  # "No config file specified after --config flag!"
        named_config(["--port", "1", "--config"])


def test_sglang_writes_each_key_verbatim_and_vllm_dashes_it() -> None:
    # vLLM's own docstring example (load_config_file): port and tensor-parallel-size.
    assert _words("port: 12323\ntensor-parallel-size: 4\n", "vllm") == [
        "--port",
        "12323",
        "--tensor-parallel-size",
        "4",
    ]
    assert _words("gpu_memory_utilization: 0.9\n", "vllm") == ["--gpu-memory-utilization", "0.9"]
    assert _words("mem_fraction_static: 0.88\n") == ["--mem_fraction_static", "0.88"]  # no sglang flag: exit 2


def test_booleans_lists_and_mappings_as_each_engine_writes_them() -> None:
    # 0.5.23 _add_boolean_arg: store_true → the bare flag or nothing; another boolean → "--key true/false".
    text = "trust-remote-code: true\ndisable-radix-cache: false\nenable-foo: false\ncuda-graph-bs: [1, 2, 4]\n"
    assert _words(text) == ["--trust-remote-code", "--enable-foo", "false", "--cuda-graph-bs", "1", "2", "4"]
    # vLLM (argparse_utils.py): false is --no-KEY where that flag exists; a nested mapping is its JSON.
    text = "enable-prefix-caching: false\nspeculative-config:\n  model: m\n  num_speculative_tokens: 3\n"
    assert _words(text, "vllm") == [
        "--no-enable-prefix-caching",
        "--speculative-config",
        '{"model": "m", "num_speculative_tokens": 3}',
    ]


def test_the_file_is_bounded_and_its_aliases_refused() -> None:
    with pytest.raises(ConfigError, match=r"over 1048576 bytes"):
        load_yaml("a: " + "x" * MAX_CONFIG_BYTES, "/c.yaml")
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    with pytest.raises(ConfigError, match=r"^/c.yaml: --config /c.yaml \(line 2\): aliases are not read$"):
        load_yaml(bomb, "/c.yaml")
    with pytest.raises(ConfigError, match="must hold a mapping"):  # "Config file must contain a dictionary"
        load_yaml("- a\n- b\n", "/c.yaml")
    with pytest.raises(ConfigError, match=r"\(line 2\): expected ',' or ']'"):
        load_yaml("a: [unclosed\n", "/c.yaml")
    assert load_yaml("", "/c.yaml") == {}  # an empty file is no options (config_data None → {})


def test_the_yaml_value_is_read_and_the_command_line_wins() -> None:
    yaml_text = "mem-fraction-static: 0.88\nchunked-prefill-size: 8192\n"
    cmd = "/opt/venv/bin/python3 -m sglang.launch_server --config /etc/sglang/k.yaml"
    settings = read_settings(_sources(cmd, {"/etc/sglang/k.yaml": yaml_text}))
    assert (settings.mem_fraction_static, settings.chunked_prefill_size) == ("0.88", "8192")
    cli = read_settings(_sources(cmd + " --mem-fraction-static 0.8", {"/etc/sglang/k.yaml": yaml_text}))
    assert cli.mem_fraction_static == "0.8"
    [note] = config_notes(_sources(cmd + " --mem-fraction-static 0.8", {"/etc/sglang/k.yaml": yaml_text}))
    assert note == (
        "--config /etc/sglang/k.yaml sets mem-fraction-static 0.88 (the command line overrides it), "
        "chunked-prefill-size 8192; the command line wins over it"
    )


def test_edit_on_a_yaml_fraction_was_wrong_before_and_now_overrides_it() -> None:
    # Before: "no --mem-fraction-static in the unit: pass --mem-fraction-static to set one".
    cmd = "/opt/venv/bin/sglang serve --config /etc/sglang/k.yaml"
    plan = plan_edit(_sources(cmd, {"/etc/sglang/k.yaml": "mem-fraction-static: 0.9\n"}), DesiredState(), now=NOW)
    [change] = [c for c in plan.changes if c.setting == "--mem-fraction-static"]
    assert (change.old, change.new) == ("0.9", "0.89")
    assert change.where == "ExecStart=, over mem-fraction-static: 0.9 in --config /etc/sglang/k.yaml"
    assert [f.path for f in plan.files] == [FRAGMENT]
    explicit = plan_edit(
        _sources(cmd, {"/etc/sglang/k.yaml": "mem-fraction-static: 0.9\n"}),
        DesiredState(mem_fraction_static=Decimal("0.9")),
        now=NOW,
    )
    assert not [c for c in explicit.changes if c.setting == "--mem-fraction-static"]  # already 0.9: nothing


@pytest.mark.parametrize(
    ("exec_start", "configs", "why"),
    [
        ("/opt/venv/bin/sglang serve --config /etc/k.yaml", None, "is not read"),
        ("/opt/venv/bin/sglang serve --config k.yaml", {}, "not read: a path relative to the service's working"),
        ("/opt/venv/bin/sglang serve --config /etc/k.json", {}, "not read: not .yaml/.yml, which sglang refuses"),
        ("/opt/venv/bin/sglang serve --config /etc/k.yaml", {"/etc/k.yaml": None}, "is missing on the host"),
        (
            "/usr/bin/docker run --rm img python3 -m sglang.launch_server --config /etc/k.yaml",
            {},
            "inside the container",
        ),
    ],
)
def test_an_unread_yaml_is_said_so_in_the_one_line(
    exec_start: str, configs: dict[str, str | None] | None, why: str
) -> None:
    with pytest.raises(ConfigError) as info:
        plan_edit(_sources(exec_start, configs), DesiredState(), now=NOW)
    assert "no --mem-fraction-static on the command line, and --config" in str(info.value) and why in str(info.value)


def test_the_probe_says_which_files_are_config_files() -> None:
    out = (
        "@@unit sglang.service\n@@configs /etc/sglang/k.yaml\n"
        "@@file exists=1 sha256=x size=2 path=/etc/sglang/k.yaml\nYTogMQo=\n@@end\n"
    )
    found = parse_probe(out, "sglang.service")
    assert found.config_paths == ("/etc/sglang/k.yaml",) and found.files["/etc/sglang/k.yaml"].text == "a: 1\n"


def test_a_vllm_unit_reads_its_yaml_and_refuses_nothing_the_file_does_not_set() -> None:
    cmd = "/usr/local/bin/vllm serve /models/m --config /etc/vllm/m.yaml"
    service = load_service(_sources(cmd, {"/etc/vllm/m.yaml": "max_model_len: 8192\n"}))
    assert service.config is not None and [w.text for w in service.config.words or ()] == ["--max-model-len", "8192"]
    plan = plan_edit(_sources(cmd, {"/etc/vllm/m.yaml": "max_model_len: 8192\n"}), DesiredState(), now=NOW)
    assert ("--gpu-memory-utilization", None, "0.89") in [(c.setting, c.old, c.new) for c in plan.changes]


def test_a_vllm_unit_without_a_utilization_steps_down_from_its_release_default() -> None:
    # vLLM 0.20.0 vllm/config/cache.py: gpu_memory_utilization Field(default=0.92) (core/engines/vllm/defaults.py)
    cmd = "/usr/local/bin/vllm serve /models/m"
    desired = DesiredState().with_fraction_default(Decimal("0.92"))
    plan = plan_edit(_sources(cmd, {}), desired, now=NOW)
    assert ("--gpu-memory-utilization", None, "0.91") in [(c.setting, c.old, c.new) for c in plan.changes]
    sglang = "/opt/venv/bin/python3 -m sglang.launch_server --model-path /m"
    with pytest.raises(ConfigError, match="no --mem-fraction-static"):  # sglang has no default: still refused
        plan_edit(_sources(sglang, {}), desired, now=NOW)


def test_a_template_instance_overrides_the_shared_yaml_in_its_own_dropin() -> None:
    from remediate.core.unitfile.dropin import plan_instance_edit

    template = "/etc/systemd/system/sglang@.service"
    text = "[Service]\nExecStart=/opt/venv/bin/sglang serve --config /etc/sglang/shared.yaml --port 3000%i\n"
    sources = UnitSources(
        SourceFile(template, text),
        (),
        {},
        "sglang@1.service",
        {"/etc/sglang/shared.yaml": load_config("mem-fraction-static: 0.9\n", "/etc/sglang/shared.yaml")},
    )
    plan = plan_instance_edit(sources, DesiredState(alloc_conf=None), now=NOW)
    [dropin] = plan.files
    assert dropin.created and dropin.path == "/etc/systemd/system/sglang@1.service.d/90-remediate-oom.conf"
    assert "--port 3000%i --mem-fraction-static 0.89 --chunked-prefill-size 4096\n" in dropin.new_text
    assert "mem-fraction-static 0.9->0.89 (from --config /etc/sglang/shared.yaml)" in dropin.new_text
