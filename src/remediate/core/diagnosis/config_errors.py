"""Startup configuration errors: a flag the server's argparse refused, expandable segments the engine refused.

Neither is an OOM, and no fraction fixes either: both block ``oom``'s recipe (``blocking``). The recipe would
even make the second worse, since it adds ``expandable_segments:True`` (core/unitfile/guard.py keeps it off
such units).
"""

from __future__ import annotations

from remediate.core.diagnosis.advice import AdvisorInput, Recommendation
from remediate.core.diagnosis.findings import Finding

# Flags one sglang version renamed, the other's spelling: sglang 0.5.23 server_args.py (arg_groups/fields/exec_.py
# ExecConfig.cuda_graph_max_bs_decode/_prefill) has only the split flags, so the old one is an ambiguous prefix
# there; 0.5.5 server_args.py add_cli_args has only --cuda-graph-max-bs, so the split ones are unrecognised.
RENAMED: dict[str, tuple[str, ...]] = {
    "--cuda-graph-max-bs": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"),
    "--cuda-graph-max-bs-decode": ("--cuda-graph-max-bs",),
    "--cuda-graph-max-bs-prefill": ("--cuda-graph-max-bs",),
}


def advise_invalid_argument(findings: list[Finding], s: AdvisorInput) -> Recommendation:
    """argparse exited 2: the flag it refused, and what to write instead where known; the unit stays as is."""
    f = findings[-1]
    flag = f.bad_flag or "an option"
    if f.bad_flag in RENAMED and (spelled := s.release_graph_flag) not in (None, f.bad_flag):
        # the release the host runs names its own spelling (core/engines/sglang/flags.py graph_batch_flag)
        instead = f"this version does not accept it: write {spelled}"
    elif f.flag_choices:
        instead = f"it is ambiguous here: write one of {', '.join(f.flag_choices)} in full"
    elif f.bad_flag in RENAMED:
        others = " or ".join(RENAMED[f.bad_flag])
        instead = f"this version does not know it: the other sglang versions spell it {others}"
    else:
        instead = "this version does not know it: remove it or use the spelling this version's --help lists"
    reasons = (
        f"the server refused {flag} at startup (argparse, exit 2): {instead}",
        "a configuration error, not an OOM: no --mem-fraction-static fixes it; the OOM recipe is refused",
    )
    return Recommendation(mem_fraction_static=s.mem_fraction_static, reasons=reasons, blocking=True)


def advise_expandable_refused(findings: list[Finding], s: AdvisorInput) -> Recommendation:
    """sglang refused expandable segments (Mooncake over EFA, the weight-cache daemon): remove them."""
    f = findings[-1]
    reasons = (
        f"{f.note}: remove expandable_segments from the unit's PYTORCH_CUDA_ALLOC_CONF/PYTORCH_ALLOC_CONF "
        "(sglang refuses to start with it)",
        "the OOM recipe adds expandable_segments:True and is refused here; on such a unit it leaves the "
        "allocator alone",
    )
    return Recommendation(mem_fraction_static=s.mem_fraction_static, reasons=reasons, blocking=True)
