"""After a healthy `oom` or `rollback`: what the server that answered measured, as a calibration record."""

from __future__ import annotations

from remediate.core.budget.observation import Observation, observation_from
from remediate.core.numbers import as_float
from remediate.core.startup import parse_startup
from remediate.host.facts import journal_since
from remediate.models import HostResult
from remediate.transport.base import Transport

JOURNAL_LINES = 2000  # the last start's memory lines sit near the end


def observe(transport: Transport, result: HostResult, *, command: str, at: str) -> Observation | None:
    """One record for a host that ended healthy (None when it did not, or the journal does not say)."""
    tokens = result.max_total_num_tokens
    if not result.ok or result.is_dry_run or not result.unit or not tokens:
        return None
    startup = parse_startup(journal_since(transport, result.unit, None, lines=JOURNAL_LINES))
    args = startup.server_args
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
