"""PURE: sglang's description for the engine seam, built from its flags (flags.py) and its startup reader
(core/startup.py)."""

from __future__ import annotations

from collections.abc import Sequence

from remediate.core.engines.base import Engine
from remediate.core.engines.sglang.flags import SGLANG_BOOL_FLAGS, flag_problems, graph_batch_flag, resolve_flag
from remediate.core.startup import STARTUP_LINES_ERE, parse_capacity_line


def _capacity(lines: Sequence[str]) -> int | None:
    return parse_capacity_line(lines)


# sglang server_args.py: --mem-fraction-static (no default worth writing: sglang derives it from the GPU),
# --chunked-prefill-size (-1 disables chunking), --context-length, --port 30000; /server_info (≥ 0.5.6) or
# /get_server_info.
SGLANG = Engine(
    name="sglang",
    label="sglang",
    fraction_flag="mem-fraction-static",
    prefill_flag="chunked-prefill-size",
    context_flag="context-length",
    default_port=30000,
    resolve_flag=resolve_flag,
    bool_flags=SGLANG_BOOL_FLAGS,
    capacity=_capacity,
    capacity_name="max_total_num_tokens",
    process_entry="sglang[.]launch_server|(.*/)?sglang",
    startup_lines_ere=STARTUP_LINES_ERE,
    info_paths=("/server_info", "/get_server_info"),
    graph_flag_at=graph_batch_flag,
    flag_problems_at=flag_problems,
    fraction_column="mem-fraction",
)
