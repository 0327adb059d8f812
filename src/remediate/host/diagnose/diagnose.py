"""Read-only crash diagnosis of one host: the journal of the last runs, ``systemctl show`` and nvidia-smi,
read in the probe's one round trip, turned into findings and a recommendation by the pure core.

``remediate oom`` asks the same probe for the evidence and refuses (unless ``--force``) when the unit's
latest failure contradicts the OOM recipe: a startup ``Not enough memory``, a neighbour process on the GPU,
KV-pool exhaustion. A healthy server, or a failure older than the last good start, never blocks.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from remediate.core.diagnosis import (
    AdvisorInput,
    Diagnosis,
    Finding,
    Recommendation,
    advise,
    oom_command,
    parse_journal,
)
from remediate.core.diagnosis.gpus import (
    Gpu,
    GpuApp,
    foreign_apps,
    parse_apps,
    parse_gpus,
    process_tree,
    visible_uuids,
)
from remediate.core.engines import SGLANG, Verdict, engine_named
from remediate.core.numbers import as_float
from remediate.core.probe import ProbeResult
from remediate.core.unitfile.edit import UnitSettings, UnitSources, read_settings
from remediate.core.unitfile.knobs import graph_flag_written
from remediate.core.unitfile.report import MASK, mask_secrets
from remediate.core.unitfile.sources import load_service
from remediate.errors import ConfigError
from remediate.host.common.options import SMI_TIMEOUT_S, RunOptions
from remediate.host.common.outcome import host_outcome, new_result, record_unit
from remediate.host.common.probe import engine_of, read_unit
from remediate.host.common.version import read_engine_version, version_notes
from remediate.models import DiagnosisReport, EngineVersion, HostResult, JsonObject, UnitState
from remediate.transport.base import Transport

DEFAULT_LINES = 2000
"""Journal lines read by default: a few runs of a TP8 server's startup and crash."""
GATE_LINES = 1000
"""Journal lines `remediate oom` reads (in its probe) to check the latest failure before it commits."""


_TIME = re.compile(
    r"^(?:@\d+(?:\.\d+)?|now|today|yesterday"
    r"|\d{4}-\d\d-\d\d(?:[ T]\d\d:\d\d(?::\d\d)?)?|\d\d:\d\d(?::\d\d)?"
    r"|-?\d+ ?(?:s|sec|seconds?|m|min|minutes?|h|hours?|d|days?|w|weeks?)(?: ago)?)$"
)


def parse_since(value: str | None, lines: int = DEFAULT_LINES) -> tuple[int | None, str | None]:
    """``--since``: a number of restarts to look back over, or a journalctl time; (restarts, time)."""
    if lines < 1:
        raise ConfigError("--lines must be at least 1")
    if value is None:
        return None, None
    text = value.strip()
    if text.isdigit():
        return int(text), None
    if _TIME.fullmatch(text):
        return None, text
    raise ConfigError(
        f"--since {value!r} is neither a number of restarts nor a time (e.g. 1, '2 hours ago', '2026-12-01 08:00')"
    )


# ServerArgs reprs and tracebacks print secrets as ``api_key='…'`` (not the env/flag forms mask_secrets knows).
# The name is checked apart from the regex: ``\w*(?:token)\w*=`` backtracks over every "token" in a long word.
_KWARG_NAME = re.compile(r"\b\w+=")
_SECRET_KWARG_NAME = re.compile(r"api_key|token|secret|password", re.IGNORECASE)
_KWARG_VALUE = re.compile(r"'[^']*'|\"[^\"]*\"|[^\s,)]+")


def masked(line: str) -> str:
    """A journal line as it may be shown or stored: secrets replaced by ``***``."""
    text = mask_secrets(line)
    out: list[str] = []
    pos = 0
    for name in _KWARG_NAME.finditer(text):
        if name.start() < pos or not _SECRET_KWARG_NAME.search(name.group(0)):
            continue
        value = _KWARG_VALUE.match(text, name.end())
        if value is not None:
            out.append(text[pos : name.end()] + MASK)
            pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def _finding_dict(finding: Finding) -> JsonObject:
    out = finding.to_dict()
    out["line"] = masked(finding.line)
    out["evidence"] = [masked(line) for line in finding.evidence]
    return out


@dataclass(frozen=True)
class DiagnosisEvidence:
    """What a host's journal, unit and GPUs say about its latest failure."""

    diagnosis: Diagnosis
    recommendation: Recommendation
    gpus: tuple[Gpu, ...]
    apps: tuple[GpuApp, ...]
    foreign: tuple[GpuApp, ...]
    notes: tuple[str, ...]
    engine: str = SGLANG.name
    verdict: Verdict | None = None  # an engine with its own failure reader (vLLM): its reading

    @property
    def is_stale(self) -> bool:
        return self.verdict.is_stale if self.verdict is not None else self.diagnosis.is_stale

    def findings_json(self) -> tuple[JsonObject, ...]:
        """The latest failure's findings, masked (the JSON's ``findings``)."""
        if self.verdict is not None:
            return (_verdict_dict(self.verdict),)
        if engine_named(self.engine).verdict is not None:  # the engine's own reader found nothing
            return ()
        return tuple(_finding_dict(f) for f in self.diagnosis.latest)

    def record(self, result: HostResult, state: UnitState, command: str | None) -> None:
        """Put the diagnosis in ``result``: the findings, the recommendation with its ``command``, the GPUs."""
        found = self.findings_json()
        # read by core/diagnosis (sglang's pipeline, the engine without a reader of its own): its runs count
        sglang = self.verdict is None and engine_named(self.engine).verdict is None
        result.engine = self.engine
        result.findings = found
        result.recommendation = {**self.recommendation.to_dict(), "command": command}
        result.diagnosis = DiagnosisReport(
            state=state,
            all_findings=len(self.diagnosis.findings) if sglang else len(found),
            is_stale=self.is_stale,
            runs=len(self.diagnosis.runs) if sglang else None,
            gpus=tuple(g.to_dict() for g in self.gpus),
            gpu_processes=tuple(a.to_dict() for a in self.apps),
            foreign_gpu_processes=tuple(a.to_dict() for a in self.foreign),
        )
        if sglang:
            # the pool of the newest run that logged one: the server's tokens before the crash
            result.max_total_num_tokens = next(
                (r.max_total_num_tokens for r in reversed(self.diagnosis.runs) if r.max_total_num_tokens), None
            )


_CONTAINER_TOOLS = frozenset({"docker", "podman", "nerdctl", "ctr"})


def unit_settings(
    sources: UnitSources, server: frozenset[int], gpus: tuple[Gpu, ...], foreign: tuple[GpuApp, ...] = ()
) -> AdvisorInput:
    """The advisor's input from the unit on disk (what a restart would run) and the GPUs."""
    try:
        current = read_settings(sources)
    except ConfigError:
        current = None
    try:
        graph = graph_flag_written(load_service(sources).items())
    except ConfigError:
        graph = None
    settings = advisor_input(current, server, gpus, foreign)
    return replace(settings, graph_flag=graph[0], cuda_graph_max_bs=graph[1]) if graph else settings


def advisor_input(
    current: UnitSettings | None,
    server: frozenset[int] = frozenset(),
    gpus: tuple[Gpu, ...] = (),
    foreign: tuple[GpuApp, ...] = (),
) -> AdvisorInput:
    """The advisor's input from the unit's settings (None: unknown, the logged ones fill in) and the GPUs."""
    chunk = as_float(current.chunked_prefill_size, text=True) if current else None
    return AdvisorInput(
        mem_fraction_static=as_float(current.mem_fraction_static, text=True) if current else None,
        chunked_prefill_size=int(chunk) if chunk is not None else None,
        alloc_conf=current.alloc_conf if current else None,
        total_gpu_bytes=min((g.total_bytes for g in gpus), default=None),
        server_pids=tuple(sorted(server)),
        neighbour_processes=tuple((a.pid, a.used_bytes) for a in foreign),
    )


def journal_diagnosis(
    lines: list[str], show: dict[str, str], since_restarts: int | None = None
) -> tuple[Diagnosis, list[str]]:
    """The journal's lines (``journalctl -o short-iso``, oldest first) → the diagnosis of the runs asked for."""
    diagnosis = parse_journal(lines, show)
    if since_restarts is not None and since_restarts + 1 < len(diagnosis.runs):
        start = diagnosis.runs[-(since_restarts + 1)].start_index
        diagnosis = parse_journal(lines[start:], show)
    notes: list[str] = []
    if not lines:
        notes.append("the journal had no lines for this unit in the window read")
    return diagnosis, notes


def _verdict_dict(verdict: Verdict) -> JsonObject:
    out = verdict.to_dict()
    out["line"] = masked(verdict.line)
    out["evidence"] = [masked(line) for line in verdict.evidence]
    return out


def recipe_command(target: str, unit: str | None, rec: Recommendation) -> str | None:
    """An engine verdict's command: the plain ``remediate oom`` when its advice is the recipe (it carries the
    alloc conf) and nothing blocks it; None when the fix is no knob of ``oom``'s."""
    if rec.blocking or not rec.alloc_conf:
        return None
    return shlex.join(["remediate", "oom", target, *(["--unit", unit] if unit else [])])


def visible_devices(sources: UnitSources) -> str | None:
    """The unit's ``CUDA_VISIBLE_DEVICES`` (None: unset, or not known here)."""
    try:
        value = load_service(sources).lookup("CUDA_VISIBLE_DEVICES")
    except ConfigError:
        return None
    return value.assignment.value.text if value.assignment is not None else None


def read_diagnosis_evidence(
    found: ProbeResult,
    sources: UnitSources,
    since_restarts: int | None = None,
    smi_timeout: int = SMI_TIMEOUT_S,
    version: EngineVersion | None = None,
) -> DiagnosisEvidence:
    """Parse the evidence sections of a probe (``journal_lines`` > 0) into a diagnosis and a recommendation;
    ``version``: the engine's release where it was read (flags and defaults are keyed on it)."""
    state = found.state
    assert state is not None
    show = dict(state.properties)
    lines = list(found.sections.get("journal", ()))
    diagnosis, notes = journal_diagnosis(lines, show, since_restarts)
    gpus = parse_gpus(found.sections.get("gpus", ()))
    apps = parse_apps(found.sections.get("apps", ()))
    gpu_note = found.section_notes.get("gpus")
    smi_notes = {gpu_note, found.section_notes.get("apps")}
    if gpu_note == "absent":
        notes.append("nvidia-smi is not on this host: GPU memory not read")
    elif "timeout" in smi_notes:
        # templates/probe.sh.j2 runs it under `timeout -k 2 N` (--smi-timeout): a hung driver (after an Xid
        # error) is a finding
        notes.append(
            f"nvidia-smi timed out (no answer within {smi_timeout} s; a hung GPU driver?): GPU memory not read"
        )
    elif gpu_note or found.section_notes.get("apps"):
        notes.append("nvidia-smi failed: GPU memory not read")
    server = process_tree(found.sections.get("ps", ()), state.main_pid)
    if any(word.rsplit("/", 1)[-1] in _CONTAINER_TOOLS for argv in state.exec_argvs for word in argv[:3]):
        # the server's processes belong to the container runtime, not to MainPID: GPU users cannot be attributed
        server = frozenset()
        if apps:
            notes.append("the server runs in a container: GPU processes are not attributed to the unit")
    # a process on GPUs the server does not use (a sibling instance of the template on the other half of an
    # 8-GPU host) is no neighbour
    foreign = foreign_apps(apps, server, visible_uuids(visible_devices(sources), gpus))
    for app in foreign:
        notes.append(f"GPU process {app.pid} ({app.used_bytes >> 20} MiB) is not part of {state.unit}")
    engine = engine_of(found)
    if engine.verdict is not None and engine.advise is not None:
        # An engine with its own failure reader (vLLM): its verdict, read past its wrappers, and its advice.
        verdict = engine.verdict(lines)
        try:
            fraction = read_settings(sources).mem_fraction_static
        except ConfigError:
            fraction = None
        if fraction is None and version is not None and version.engine == engine.name and engine.default_fraction_at:
            # a unit that sets none runs at its release's own default (core/engines/vllm/defaults.py)
            default = engine.default_fraction_at(version.release)
            fraction = None if default is None else str(default)
        total = min((g.total_bytes for g in gpus), default=None)  # the card's total: a number for "raise"
        rec = engine.advise(verdict, fraction, len(foreign), total) if verdict is not None else Recommendation()
        return DiagnosisEvidence(diagnosis, rec, gpus, apps, foreign, tuple(notes), engine.name, verdict)
    settings = unit_settings(sources, server, gpus, foreign)
    if version is not None and version.engine == engine.name and engine.graph_flag_at and version.release:
        settings = replace(settings, release_graph_flag=engine.graph_flag_at(version.release))  # flags by release
    rec = advise(diagnosis, settings)
    return DiagnosisEvidence(diagnosis, rec, gpus, apps, foreign, tuple(notes))


def refusal(evidence: DiagnosisEvidence) -> str | None:
    """Why ``oom`` must not apply its recipe here (None: go ahead)."""
    rec = evidence.recommendation
    if not rec.blocking or evidence.is_stale:
        return None
    return f"the latest failure is {rec.kind}: {rec.reasons[0]}"


def diagnose_host(
    transport: Transport,
    options: RunOptions,
    *,
    lines: int = DEFAULT_LINES,
    since: str | None = None,
    since_restarts: int | None = None,
    label: str | None = None,
    now: Callable[[], float] = time.time,
) -> HostResult:
    """Read-only, no lock: what happened on this host, why, and the ``remediate oom`` that would fix it."""
    result = new_result(label or transport.host, now)
    with host_outcome(result, now):
        transport.open()
        found, sources = read_unit(
            transport, options.unit, journal_lines=lines, journal_since=since, smi_timeout=options.smi_timeout
        )
        state = record_unit(result, found, sources)
        result.engine_version = read_engine_version(
            transport, found, options, journal=found.sections.get("journal", ())
        )
        evidence = read_diagnosis_evidence(found, sources, since_restarts, options.smi_timeout, result.engine_version)
        command = (
            oom_command(result.host, options.unit, evidence.recommendation)
            if evidence.verdict is None
            else recipe_command(result.host, options.unit, evidence.recommendation)
        )
        result.outcome = "unchanged"  # read-only: nothing was changed
        result.notes = list(evidence.notes) + version_notes(sources, result.engine_version)
        evidence.record(result, UnitState(state.active_state, state.get("SubState"), state.n_restarts), command)
    return result
