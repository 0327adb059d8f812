"""PURE: journal lines (+ a parsed ``systemctl show``) → a Diagnosis of typed findings with evidence.

Tracebacks are multi-line messages: only their first line carries sglang's ``[time TPn]`` prefix, and TP
ranks write to the same stream, so their lines interleave. A rank's exception line is matched to the
oldest open traceback header (``… hit an exception:``) still waiting for one; frames go to the newest.
Unknown text yields no finding; nothing here raises on any input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from remediate.core.diagnosis.findings import LOADING_NOTE, Diagnosis, Finding, Phase
from remediate.core.diagnosis.patterns import match_line
from remediate.core.diagnosis.runs import RunSplitter
from remediate.core.diagnosis.systemd import crash_loop_finding
from remediate.core.logline import LogLine, split_lines

# sglang scheduler.py: logger.error(f"{name} hit an exception: {traceback}"), at the start of its message.
_HEADER = re.compile(r"(\w+) hit an exception:")
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt)(?::|$)")
_ONE_LINE = re.compile(r"(?:Error|Exception): ")
_PREFILL = re.compile(r"Prefill batch\.[^#]*(?:#(?!new-token: )[^#]*)*#new-token: (\d+)")
_DECODE = re.compile(r"Decode batch\.[^#]*(?:#(?!running-req: )[^#]*)*#running-req: (\d+)")
_FRAME = re.compile(r'^\s+File "|^\s{4}\S')
_CHAINED = re.compile(
    r"^During handling of the above exception, another exception occurred|"
    r"^The above exception was the direct cause of the following exception"
)
_MAX_FRAMES = 200
_LOADING = ("load_model", "load_weights", "_initialize_model")


@dataclass
class _Block:
    """An open traceback: the rank whose header opened it and the frame lines seen since."""

    rank: int | None
    header: LogLine
    frames: list[LogLine] = field(default_factory=list)


@dataclass
class _RankState:
    """The scheduler's latest status line per rank (None = any rank)."""

    status: dict[int | None, tuple[str, int, LogLine]] = field(default_factory=dict)

    def note(self, line: LogLine) -> None:
        if m := _PREFILL.match(line.text):
            self._set(line, ("prefill", int(m[1]), line))
        elif m := _DECODE.match(line.text):
            self._set(line, ("decode", int(m[1]), line))

    def _set(self, line: LogLine, value: tuple[str, int, LogLine]) -> None:
        self.status[line.rank] = value
        self.status[None] = value

    def latest(self, rank: int | None) -> tuple[str, int, LogLine] | None:
        return self.status.get(rank) or self.status.get(None)


def _phase_from_frames(frames: Sequence[LogLine]) -> Phase | None:
    text = "\n".join(f.text for f in frames)
    if "cuda_graph_runner" in text and "capture" in text:
        return "graph_capture"
    if "forward_decode" in text:
        return "decode"
    if "forward_extend" in text or "forward_split_prefill" in text:
        return "prefill"
    return None


def parse_journal(
    lines: Sequence[str],
    show: Mapping[str, str] | None = None,
    previous_restarts: int | None = None,
) -> Diagnosis:
    """Everything the journal (oldest line first) and ``systemctl show`` say about why the server died."""
    parsed = split_lines(list(lines))
    splitter = RunSplitter()
    status = _RankState()
    open_blocks: list[_Block] = []
    closed: _Block | None = None  # the traceback an exception line just ended (a chained one continues it)
    findings: list[Finding] = []
    seen: dict[tuple[str, int, int | None, str], int] = {}
    for i, line in enumerate(parsed):
        splitter.feed(line)
        if splitter.runs[-1].start_index == line.index and splitter.run:
            open_blocks.clear()
            status = _RankState()
        status.note(line)
        rank = line.rank
        block: _Block | None = None
        if _HEADER.match(line.text):
            open_blocks = [*open_blocks[-15:], _Block(rank=rank, header=line)]
            if _ONE_LINE.search(line.text):  # a flattened traceback: header and exception on one line
                block = open_blocks.pop()
        elif not line.has_sglang_prefix and closed is not None and _CHAINED.match(line.text):
            open_blocks.append(closed)  # the chained traceback belongs to the same rank's failure
            closed = None
        elif not line.has_sglang_prefix and open_blocks:
            if _FRAME.match(line.text):
                if len(open_blocks[-1].frames) < _MAX_FRAMES:
                    open_blocks[-1].frames.append(line)
            elif _EXCEPTION_LINE.match(line.text):
                block = closed = open_blocks.pop(0)
                rank = block.rank
        found = match_line(line, parsed[i + 1 : i + 8])
        if found is None:
            continue
        frames = block.frames if block else []
        evidence = [block.header] if block and block.header is not line else []
        evidence += [f for f in frames if "sglang" in f.text or "torch" in f.text][-6:]
        evidence.append(line)
        evidence += found.extra
        phase = found.phase
        prefill_tokens = running = None
        if found.kind in ("cuda_oom_runtime", "cuda_error_oom"):
            phase = _phase_from_frames(frames) or phase
            latest = status.latest(rank)
            if phase is None and latest is not None:
                phase = "prefill" if latest[0] == "prefill" else "decode"
            if phase == "graph_capture" and found.kind == "cuda_oom_runtime":
                found = found.as_kind("cuda_oom_graph_capture")
            if latest is not None and phase == latest[0]:
                evidence.insert(0, latest[2])
                if phase == "prefill":
                    prefill_tokens = latest[1]
                else:
                    running = latest[1]
            phase = phase or "unknown"
            if phase == "unknown" and any(w in f.text for f in frames for w in _LOADING):
                found = found.with_note(LOADING_NOTE)
        elif found.kind == "kv_pool_exhausted":
            latest = status.latest(rank)
            if latest is not None and latest[0] == phase == "decode":
                running = latest[1]
                evidence.insert(0, latest[2])
        family = "torch" if found.kind.startswith("cuda_oom") else found.kind
        key = (family, splitter.run, rank, found.dedupe)
        finding = found.finding(
            line=line,
            evidence=tuple(dict.fromkeys(e.evidence for e in sorted(evidence, key=lambda e: e.index))),
            run=splitter.run,
            rank=rank,
            phase=phase,
            prefill_tokens=prefill_tokens,
            running_requests=running,
        )
        if key in seen:
            first = findings[seen[key]]
            if finding.kind == "cuda_oom_graph_capture" and first.kind != finding.kind:
                findings[seen[key]] = replace(
                    first, kind=finding.kind, phase="graph_capture", graph_flag=finding.graph_flag or first.graph_flag
                )
            elif finding.graph_flag and not first.graph_flag:
                findings[seen[key]] = replace(first, graph_flag=finding.graph_flag)
            continue
        seen[key] = len(findings)
        findings.append(finding)
    loop = crash_loop_finding(parsed, show or {}, previous_restarts, run=splitter.run)
    if loop is not None:
        findings.append(loop)
    return Diagnosis(findings=tuple(findings), runs=tuple(splitter.runs), show=dict(show or {}))
