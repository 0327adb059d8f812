"""core/engines/version.py on the engines' own texts: sglang's server-info document, vLLM's /version answer and
startup lines (each release's spelling), the *.dist-info names pip writes."""

from __future__ import annotations

import pytest

from remediate.core.engines.version import (
    EngineVersion,
    clean_version,
    first_known,
    parse_dist_version,
    parse_log_version,
    parse_server_version,
)

# vLLM's startup lines as journalctl -o short-iso shows them (the logger's prefix kept).
V011 = (
    "2026-12-04T03:20:00+0000 gpu-0 python3[811]: INFO 12-04 03:20:00 [api_server.py:1839] "
    "vLLM API server version 0.11.0"
)
V085 = "INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5"
# 0.34.0 entrypoints/common/startup.py log_version_and_model: the monochrome logo (NewLineFormatter: each line
# under the prefix), and the plain line with VLLM_DISABLE_LOG_LOGO.
LOGO = [
    "INFO 12-04 03:20:00 [launcher.py:368]        █     █     █▄   ▄█",
    "INFO 12-04 03:20:00 [launcher.py:368]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.34.0",
    "INFO 12-04 03:20:00 [launcher.py:368]   █▄█▀ █     █     █     █  model   Qwen/Qwen3-8B",
]
COLOURED = "INFO [x] \x1b[93m▄▄\x1b[0m \x1b[94m▄█\x1b[0m \x1b[1m█ ▀▄▀ █\x1b[0m  version \x1b[1m0.33.0\x1b[0m"
PLAIN = "INFO 12-04 03:20:00 [startup.py:43] vLLM server version 0.34.0, serving model Qwen/Qwen3-8B"


def test_sglang_server_info_version_key() -> None:
    # sglang 0.5.23 srt/entrypoints/http_server.py server_info: {..., "version": __version__, "frontend": "python"}
    info = {"max_total_num_tokens": 195011, "version": "0.5.23", "frontend": "python"}
    assert parse_server_version("sglang", info) == EngineVersion("sglang", "0.5.23", "server")
    assert parse_server_version("sglang", {"max_total_num_tokens": 1}) is None  # an old stand-in, a proxy
    assert parse_server_version("sglang", None) is None


def test_vllm_version_document() -> None:
    # vllm entrypoints/openai/api_server.py show_version: {"version": VLLM_VERSION}
    assert parse_server_version("vllm", {"version": "0.11.0+cu128"}) == EngineVersion("vllm", "0.11.0+cu128", "server")


@pytest.mark.parametrize("bad", ["", "latest", "0.5.23; rm -rf /", "1" * 80, 5, None, ["0.5.23"]])
def test_a_server_answer_that_is_no_version_is_ignored(bad: object) -> None:
    assert parse_server_version("sglang", {"version": bad}) is None


def test_clean_version_accepts_pep440_forms() -> None:
    for text in ("0.5.23", "0.5.5.post3", "0.4.6.post5", "0.12.0rc1", "0.11.0+cu128", "0.6.3.dev45+g1234abc"):
        assert clean_version(text) == text
    assert clean_version("v0.8.5") == "0.8.5"
    assert clean_version("abc") is None


@pytest.mark.parametrize(
    ("lines", "version"),
    [([V011], "0.11.0"), ([V085], "0.8.5"), (LOGO, "0.34.0"), ([PLAIN], "0.34.0"), ([COLOURED], "0.33.0")],
)
def test_vllm_startup_line_per_release(lines: list[str], version: str) -> None:
    assert parse_log_version("vllm", lines) == EngineVersion("vllm", version, "log")


def test_the_newest_start_wins_and_sglang_logs_none() -> None:
    assert parse_log_version("vllm", [V085, "other", V011]) == EngineVersion("vllm", "0.11.0", "log")
    assert parse_log_version("vllm", ["a request mentioning version 9.9"]) is None
    assert parse_log_version("sglang", [V011]) is None  # sglang logs no version at startup


def test_dist_info_names() -> None:
    listed = [
        "/opt/sglang/lib/python3.12/site-packages/sglang-0.5.23.dist-info",
        "/usr/lib/python3/dist-packages/sglang-0.5.5.dist-info",
    ]
    assert parse_dist_version("sglang", listed) == EngineVersion("sglang", "0.5.23", "package")  # search order
    assert parse_dist_version("vllm", listed) is None
    assert parse_dist_version("vllm", ["/v/lib/python3.11/site-packages/vllm-0.11.0+cu128.dist-info"]) == (
        EngineVersion("vllm", "0.11.0+cu128", "package")
    )
    assert parse_dist_version("sglang", ["/x/sglang-0.4.6.post5-py3.10.egg-info"]) == (
        EngineVersion("sglang", "0.4.6.post5", "package")
    )
    assert parse_dist_version("sglang", ["/x/sglang_router-0.2.1.dist-info", "", "junk"]) is None


def test_release_first_known_and_compare() -> None:
    assert EngineVersion("sglang", "0.5.5.post3", "server").release == (0, 5, 5)
    assert EngineVersion("vllm", "0.11.0+cu128", "log").release == (0, 11, 0)
    assert EngineVersion("vllm", "0.12.0rc1", "log").release == (0, 12, 0)
    package = EngineVersion("sglang", "0.5.23", "package")
    assert first_known(None, None, package) is package
    assert first_known(None, None) is None
    assert package.to_dict() == {"engine": "sglang", "version": "0.5.23", "source": "package"}
    assert package.describe() == "sglang 0.5.23 (package)"
