"""A vLLM unit's memory budget: its evidence read (journal, ``/metrics``, ``/v1/models``, nvidia-smi, the unit's
command line), the pool planned per ``--gpu-memory-utilization`` with the ``max_model_len`` floor held, and the
choice for ``oom --auto``. The model, the calibration and the choice are the pure core's
(:mod:`remediate.core.engines.vllm.capacity` on top of :mod:`remediate.core.capacity.pool` and ``headroom``),
the same as sglang's; only the evidence and the flags' names differ.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from remediate.core.capacity.headroom import Knobs, Spike, choose
from remediate.core.capacity.observation import matching
from remediate.core.capacity.pool import Measured, Unmodelled, calibrate
from remediate.core.diagnosis.torch_oom import parse_torch_oom
from remediate.core.engines.version import parse_log_version
from remediate.core.engines.vllm.advice import kv_bytes_refusal
from remediate.core.engines.vllm.argv import VllmArgs, parse_vllm_args
from remediate.core.engines.vllm.capacity import (
    CHUNK_FLAG,
    DEFAULT_BLOCK_SIZE,
    FRACTION_FLAG,
    CacheConfig,
    VllmNumbers,
    below_floor,
    default_utilization,
    floor_utilization,
    parse_cache_config,
    vllm_model,
)
from remediate.core.engines.vllm.capacity import hold_floor as _hold_floor
from remediate.core.engines.vllm.defaults import default_utilization_at
from remediate.core.engines.vllm.failures import RUNTIME_OOM, diagnose_vllm
from remediate.core.engines.vllm.startup import STARTUP_LINES_ERE, parse_vllm_startup
from remediate.core.journal import SavedJournal
from remediate.core.probe import ProbeResult
from remediate.core.startup import ServerSettings, StartupNumbers, parse_startup
from remediate.core.unitfile.command import find_in_exec
from remediate.core.unitfile.edit import DesiredState, UnitSources
from remediate.core.unitfile.model import parse_unit
from remediate.core.unitfile.report import mask_secrets
from remediate.errors import ConfigError
from remediate.host.common.facts import fetch_json
from remediate.host.common.options import BudgetOptions, RunOptions
from remediate.host.common.probe import endpoint_of, load_config
from remediate.host.plan.budget import (
    EXPANDABLE,
    BudgetEvidence,
    HostBudget,
    SavedPlan,
    plan_document,
    proposed_knobs,
)
from remediate.transport.base import Transport

JOURNAL_LINES = 5000
VLLM_PLAN_ABSENT = ("systemctl", "metrics", "v1_models", "nvidia-smi")
"""What a live `plan` of a vLLM unit reads besides the journal and the unit: its state, /metrics, /v1/models and
the GPUs' total memory."""
_TAIL, _SMI = "@@journal-tail", "@@smi"
_MIB = 1 << 20
_MODEL_LINE = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: model='([^']*)'")


def vllm_args(found: ProbeResult) -> VllmArgs | None:
    """The vLLM command line of the unit (its words after ``serve`` or the api_server module)."""
    assert found.state is not None
    for argv in found.state.exec_argvs:
        try:
            command = find_in_exec(shlex.join(argv), "vllm")
        except ConfigError:
            continue
        if command is not None:
            words, serve = [t.text for t in command.args], command.entry.text == "serve"
            args = parse_vllm_args(words, serve=serve)
            path = args.config_file if "--config" in words else None  # --config=FILE: vLLM never reads it
            remote = found.files.get(path) if path in found.config_paths else None
            read = load_config(remote.text, remote.path) if remote is not None and remote.exists else None
            if read is not None and read.data is not None and not command.in_container:
                return parse_vllm_args(words, serve=serve, config={str(k): v for k, v in read.data.items()})
            return args
    return None


@dataclass(frozen=True)
class VllmEvidence:
    """What a vLLM host says about its pool, and the settings that decide the spike."""

    numbers: VllmNumbers
    cache: CacheConfig
    batched: int | None
    is_expandable: bool
    spike: Spike | None
    spike_note: str | None
    model: str | None
    tp_size: int | None
    kv_bytes: str | None = None  # --kv-cache-memory-bytes (the unit's, else the size the last start logged)


def read_vllm_journal(transport: Transport, unit: str) -> tuple[list[str], list[str], list[str]]:
    """One round trip: the startup lines (last 400), the last ``JOURNAL_LINES`` lines, nvidia-smi's memory."""
    quoted = shlex.quote(unit)
    command = (
        f"journalctl -u {quoted} -o cat --no-pager 2>/dev/null | grep -E {shlex.quote(STARTUP_LINES_ERE)} "
        f"| tail -n 400; echo {_TAIL}; journalctl -u {quoted} -o cat --no-pager -n {JOURNAL_LINES} 2>/dev/null; "
        f"echo {_SMI}; timeout 10 nvidia-smi --query-gpu=memory.total,memory.reserved --format=csv,noheader,nounits "
        "2>/dev/null"
    )
    out = transport.run(command, timeout=60).stdout
    head, _, rest = out.partition(_TAIL + "\n")
    tail, _, smi = rest.partition(_SMI + "\n")
    clean = [mask_secrets(line) for line in head.splitlines() if line.strip()]
    return clean, [mask_secrets(line) for line in tail.splitlines() if line.strip()], smi.splitlines()[:64]


def smi_total_gib(lines: list[str]) -> float | None:
    """torch's capacity of the smallest GPU: nvidia-smi's memory.total less memory.reserved (MiB)."""
    totals = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            totals.append((int(parts[0]) - int(parts[1])) * _MIB / (1 << 30))
    return min(totals) if totals else None


def vllm_spike(journal: list[str], utilization: float | None) -> tuple[Spike | None, float | None, str | None]:
    """The newest runtime prefill OOM (``EngineCore encountered a fatal error.`` then torch's text) as a spike,
    and torch's total capacity from that text."""
    ooms = [f for f in diagnose_vllm(journal).failures if f.kind == RUNTIME_OOM]
    torch = parse_torch_oom(ooms[-1].evidence) if ooms else None
    if torch is None or not torch.tried_bytes:
        return None, None, "no runtime CUDA OOM of the engine in the journal"
    total = torch.total_bytes / (1 << 30) if torch.total_bytes else None
    spike = Spike(torch.tried_bytes, None, int(torch.free_bytes or 0), int(torch.reserved_unallocated_bytes or 0),
                  utilization)  # fmt: skip
    return spike, total, None


def read_vllm_evidence(transport: Transport, found: ProbeResult, options: RunOptions) -> VllmEvidence:
    """The journal and nvidia-smi in one round trip; ``/metrics`` and ``/v1/models`` when the unit is active."""
    state = found.state
    assert state is not None
    startup_lines, tail, smi = read_vllm_journal(transport, state.unit)
    cache, max_model_len = CacheConfig(), None
    if state.active_state == "active":
        host, port = endpoint_of(found, options)
        metrics = transport.http_get(host, port, "/metrics")
        if metrics.status == 200:
            cache = parse_cache_config(metrics.body.decode("utf-8", "replace"))
        models, _ = fetch_json(transport, host, port, "/v1/models")
        max_model_len = models_max_len(models)
    environment = state.get("Environment")
    return evidence_from(vllm_args(found), [*startup_lines, *tail], tail, smi, cache, max_model_len, environment)


def models_max_len(document: dict[str, Any] | None) -> int | None:
    """``max_model_len`` of the first model card of ``/v1/models``."""
    data = (document or {}).get("data")
    card = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    value = card.get("max_model_len")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _default_utilization(cache: CacheConfig, lines: list[str]) -> float:
    """The utilization of a unit that sets none: the mode ``/metrics`` reports (0.34), else the default of the
    release the journal's startup line names (core/engines/vllm/defaults.py: 0.92 from 0.20), else 0.9."""
    if cache.is_extensible is None and (version := parse_log_version("vllm", lines)) is not None:
        default = default_utilization_at(version.release)
        if default is not None:
            return default
    return default_utilization(cache)


def evidence_from(
    args: VllmArgs | None,
    lines: list[str],
    tail: list[str],
    smi: list[str],
    cache: CacheConfig,
    max_model_len: int | None,
    environment: str = "",
) -> VllmEvidence:
    """Pure reading of what was fetched: the running server's numbers first, then the log, the unit, defaults."""
    startup = parse_vllm_startup(lines)

    def number(name: str) -> str | None:
        return args.value(name) if args else None

    utilization = (
        cache.gpu_memory_utilization or _float(number("gpu-memory-utilization")) or _default_utilization(cache, lines)
    )
    block = cache.block_size or _int(number("block-size")) or DEFAULT_BLOCK_SIZE
    mml = max_model_len or startup.max_model_len or _int(number("max-model-len"))
    spike, torch_total, note = vllm_spike(tail, utilization)
    total, source = startup.total_gib, "logged total_gpu_memory"
    if total is None and torch_total is not None:
        total, source = torch_total, "torch's OOM text"
    if total is None:
        total, source = smi_total_gib(smi), "nvidia-smi memory.total − memory.reserved"
    model = (args.model if args else None) or served_model(lines)
    try:
        words = shlex.split(environment or "")
    except ValueError:  # an unbalanced quote: read the words as they stand
        words = (environment or "").split()
    alloc = " ".join(w for w in words if w.startswith(("PYTORCH_CUDA_ALLOC_CONF=", "PYTORCH_ALLOC_CONF=")))
    return VllmEvidence(
        numbers=VllmNumbers(startup, utilization, total, source if total is not None else "", block, mml),
        cache=cache,
        batched=_int(number("max-num-batched-tokens")),
        is_expandable=EXPANDABLE in alloc,
        spike=spike,
        spike_note=note,
        model=model,
        tp_size=_int(number("tensor-parallel-size")),
        kv_bytes=number("kv-cache-memory-bytes")
        or (f"({startup.kv_bytes_gib:g} GiB at the last start)" if startup.kv_bytes_gib is not None else None),
    )


def served_model(lines: list[str]) -> str | None:
    """The model of the last start, from vLLM's ``Initializing a V1 LLM engine (v…) with config: model='…'``
    (vllm/v1/engine/core.py ``EngineCore.__init__``)."""
    found = [m.group(1) for line in lines if (m := _MODEL_LINE.search(line))]
    return found[-1] if found else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def plan_vllm(evidence: VllmEvidence, options: BudgetOptions, host: str) -> HostBudget:
    """Model the pool (calibrated on the running server and this host's observations), choose, hold the floor."""
    numbers = evidence.numbers
    current = Knobs(evidence.batched, evidence.is_expandable)
    tokens = evidence.cache.tokens or numbers.startup.kv_tokens
    base = BudgetEvidence(
        startup=StartupNumbers(),
        info=ServerSettings(mem_fraction_static=numbers.utilization, chunked_prefill_size=evidence.batched,
                            page_size=numbers.block_size, max_total_num_tokens=tokens,
                            context_length=numbers.max_model_len, model_path=evidence.model),
        fraction=numbers.utilization, current=current, spike=evidence.spike, spike_note=evidence.spike_note,
        model_path=evidence.model, tp_size=evidence.tp_size,
    )  # fmt: skip
    notes = [evidence.spike_note] if evidence.spike_note else []
    if evidence.kv_bytes is not None:  # the utilization sizes nothing: no row to plan
        return HostBudget(base, None, None, notes=(*notes, kv_bytes_refusal(evidence.kv_bytes)))
    built = vllm_model(numbers)
    if isinstance(built, Unmodelled):
        return HostBudget(base, None, None, notes=(*notes, built.reason))
    measured = matching(options.observations, host, evidence.model or "", evidence.tp_size, engine="vllm")
    utilization = numbers.utilization
    assert utilization is not None
    if tokens and not any(m.fraction == utilization and m.tokens == tokens for m in measured):
        measured.append(Measured(utilization, tokens, "running server" if evidence.cache.tokens else "last start"))
    model, errors = calibrate(built, measured)
    plan = choose(model, evidence.spike, centre=utilization, current=current,
                  proposed=proposed_knobs(current, options), target_tokens=options.target_tokens,
                  margin=options.margin)  # fmt: skip
    floor = floor_utilization(model, numbers.max_model_len)
    plan = _hold_floor(plan, model, floor, numbers.max_model_len)
    return HostBudget(base, model, plan, errors, tuple(notes))


def vllm_plan_document(budget: HostBudget, evidence: VllmEvidence) -> dict[str, Any]:
    """The ``plan`` JSON of a vLLM host: the budget's document (its rows keep the budget's keys, the fraction
    being ``--gpu-memory-utilization``) plus the engine's own numbers and flags."""
    doc = plan_document(budget)
    numbers = evidence.numbers
    floor = floor_utilization(budget.model, numbers.max_model_len) if budget.model is not None else None
    doc["engine"] = "vllm"
    doc["flags"] = {"fraction": FRACTION_FLAG, "chunk": CHUNK_FLAG}
    doc["vllm"] = {
        "gpu_memory_utilization": numbers.utilization,
        "max_num_batched_tokens": evidence.batched,
        "available_kv_gib": numbers.startup.available_kv_gib,
        "kv_tokens": numbers.startup.kv_tokens,
        "block_size": numbers.block_size,
        "total_gib": None if numbers.total_gib is None else round(numbers.total_gib, 4),
        "total_source": numbers.total_source or None,
        "max_model_len": numbers.max_model_len,
        "floor_utilization": floor,
    }
    return doc


def auto_desired_vllm(
    budget: HostBudget, desired: DesiredState, *, allow_raise: bool = False
) -> tuple[DesiredState, list[str]]:
    """`oom --auto` on vLLM: the chosen utilization (never above the one that crashed unless ``allow_raise``,
    never below the ``max_model_len`` floor: the plan holds it) and batched-token budget, expandable segments;
    else the plain recipe, said so."""
    plan = budget.plan
    if plan is None or plan.chosen is None:
        why = "; ".join([*budget.notes, *(plan.reasons if plan else ()), *(plan.warnings if plan else ())])
        return desired, [f"--auto: no plan from evidence ({why or 'no startup numbers'}): the plain recipe"]
    chosen = plan.chosen
    notes: list[str] = []
    ceiling = budget.evidence.fraction
    if not allow_raise and ceiling is not None and chosen.fraction > ceiling + 1e-9:
        notes.append(f"--auto: the plan would raise {FRACTION_FLAG} to {chosen.fraction:g} (above {ceiling:g}, "
                     "the utilization that crashed); kept it: pass --allow-raise to let --auto raise it")  # fmt: skip
        chosen = next((r for r in plan.rows if abs(r.fraction - ceiling) < 1e-9), chosen)
    fraction = Decimal(f"{chosen.fraction:.4f}").normalize()
    chunk = plan.proposed.chunked_prefill_size
    auto = replace(desired, mem_fraction_static=fraction, chunked_prefill_size=chunk, chunk_is_ceiling=True,
                   alloc_conf=desired.alloc_conf or EXPANDABLE)  # fmt: skip
    notes.append(f"--auto: {FRACTION_FLAG} {fraction} (predicted {chosen.prediction.tokens:,} tokens), "
                 f"{CHUNK_FLAG} {chunk}, {EXPANDABLE}")  # fmt: skip
    return auto, notes


def recipe_warning(budget: HostBudget, evidence: VllmEvidence, utilization: float) -> str | None:
    """For `oom`'s plain recipe on a vLLM unit: the warning (or refusal text) when ``utilization`` is below the
    max_model_len floor of the planned model; None when it is not, or nothing is modelled."""
    if budget.model is None:
        return None
    return below_floor(budget.model, utilization, evidence.numbers.max_model_len)


class VllmPlan:
    """vLLM's planner (host/plan/planner.py): its journal, ``/metrics``, ``/v1/models`` and nvidia-smi; a plain
    recipe's utilization below the lowest at which one ``max_model_len`` request still fits is said (vLLM's
    ``kv_cache_utils.check_enough_kv_cache_memory`` would refuse to start)."""

    def plan(
        self,
        transport: Transport,
        found: ProbeResult,
        sources: UnitSources,
        options: RunOptions,
        budget: BudgetOptions,
        host: str,
    ) -> tuple[HostBudget, dict[str, Any]]:
        evidence = read_vllm_evidence(transport, found, options)
        planned = plan_vllm(evidence, budget, host)
        return planned, vllm_plan_document(planned, evidence)

    def choose(
        self, planned: HostBudget, desired: DesiredState, *, allow_raise: bool
    ) -> tuple[DesiredState, list[str]]:
        return auto_desired_vllm(planned, desired, allow_raise=allow_raise)

    def recipe_refusal(
        self, transport: Transport, found: ProbeResult, after: str, options: RunOptions, host: str
    ) -> str | None:
        evidence = read_vllm_evidence(transport, found, options)
        if evidence.kv_bytes is not None:  # the start logged it (a --config file's): lowering the utilization is moot
            raise ConfigError(kv_bytes_refusal(evidence.kv_bytes), source=found.state.unit if found.state else None)
        return recipe_warning(plan_vllm(evidence, BudgetOptions(), host), evidence, float(after))

    def owns_journal(self, messages: list[str]) -> bool:
        """vLLM's startup lines and no sglang's (sglang's reader, the default, has the journal otherwise)."""
        return parse_vllm_startup(messages).is_complete and not parse_startup(messages).server_args

    def plan_saved(
        self, saved: SavedJournal, messages: list[str], unit: UnitSources | None, budget: BudgetOptions, host: str
    ) -> SavedPlan:
        """The live plan without ``/metrics`` and nvidia-smi: the unit file's command line, else vLLM's defaults."""
        args = unit_vllm_args(unit) if unit is not None else None
        evidence = evidence_from(args, messages, messages[-JOURNAL_LINES:], [], CacheConfig(), None)
        planned = plan_vllm(evidence, budget, host)
        if args is not None and unit is not None:
            label, said = "unit_file", f"settings from {unit.fragment.path}"
        else:
            label, said = (
                None,
                "no --unit-file: vLLM's defaults (--gpu-memory-utilization: the logged release's, else 0.9) and its "
                "log; pass the unit file",
            )
        return SavedPlan(planned, vllm_plan_document(planned, evidence), label, said, VLLM_PLAN_ABSENT)


def unit_vllm_args(unit: UnitSources) -> VllmArgs | None:
    """The vLLM command line of a local unit file's ExecStart= (None: it runs no vLLM)."""
    for directive in parse_unit(unit.fragment.text).directives_in("Service", "ExecStart"):
        command = find_in_exec(directive.value, "vllm")
        if command is not None:
            return parse_vllm_args([t.text for t in command.args], serve=command.entry.text == "serve")
    return None


VLLM_PLAN = VllmPlan()
