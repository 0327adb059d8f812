"""After a healthy `oom` or `rollback`: what the server that answered measured, as a calibration record."""

from __future__ import annotations

from remediate.core.capacity.observation import Observation, observation_from
from remediate.core.engines import VLLM
from remediate.core.engines.vllm.startup import parse_vllm_startup
from remediate.core.numbers import as_float
from remediate.core.startup import parse_startup
from remediate.host.common.facts import journal_since
from remediate.host.plan.budget_vllm import served_model
from remediate.models import HostResult
from remediate.transport.base import Transport

JOURNAL_LINES = 2000  # the last start's memory lines sit near the end


def observe(transport: Transport, result: HostResult, *, command: str, at: str) -> Observation | None:
    """One record for a host that ended healthy (None when it did not, or the journal does not say)."""
    tokens = result.max_total_num_tokens
    if not result.ok or result.is_dry_run or not result.unit or not tokens:
        return None
    lines = journal_since(transport, result.unit, None, lines=JOURNAL_LINES)
    startup = parse_startup(lines)
    args = startup.server_args
    if not args:  # no sglang start: a vLLM server's, if its last start logged the pool that answered
        return vllm_observation(result, lines, tokens, command=command, at=at)
    if startup.max_total_num_tokens not in (None, tokens):
        return None  # the journal's last start is not the server that answered
    fraction = as_float(args.get("mem_fraction_static"), text=True) or as_float(
        result.flags_after.get("mem_fraction_static"), text=True
    )
    model_path = args.get("model_path")
    if fraction is None or not isinstance(model_path, str) or not model_path:
        return None
    tp = args.get("tp_size")
    chunk = startup.chunked_prefill_size
    if chunk is None and isinstance(args.get("chunked_prefill_size"), int):
        chunk = int(args["chunked_prefill_size"])
    return observation_from(
        host=result.host,
        model_path=model_path,
        tp_size=tp if isinstance(tp, int) else None,
        fraction=fraction,
        tokens=tokens,
        startup=startup,
        chunked_prefill_size=chunk,
        alloc_conf=result.env_after.get("PYTORCH_CUDA_ALLOC_CONF"),
        command=command,
        at=at,
    )


def vllm_observation(result: HostResult, lines: list[str], tokens: int, *, command: str, at: str) -> Observation | None:
    """The record of a vLLM start: its utilization (as the unit now sets it), its logged pool and KV memory."""
    startup = parse_vllm_startup(lines)
    if startup.kv_tokens != tokens:
        return None  # the journal's last start is not the server that answered
    flags = result.flags_after
    raw = flags.get("gpu_memory_utilization") or flags.get("mem_fraction_static")
    utilization = as_float(raw, text=True)
    model = served_model(lines)
    if utilization is None or not 0 < utilization < 1 or model is None:
        return None
    batched = flags.get("max_num_batched_tokens") or flags.get("chunked_prefill_size")
    return Observation(
        host=result.host,
        model_path=model,
        tp_size=None,
        fraction=utilization,
        tokens=tokens,
        chunked_prefill_size=int(batched) if batched and batched.isdigit() else None,
        alloc_conf=result.env_after.get("PYTORCH_CUDA_ALLOC_CONF"),
        kv_tokens=startup.kv_tokens,
        kv_gib=startup.available_kv_gib,
        command=command,
        at=at,
        engine=VLLM.name,
    )
