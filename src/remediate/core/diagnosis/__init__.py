"""PURE: read crash evidence (journal lines, ``systemctl show``) and say which way to turn each knob."""

from __future__ import annotations

from remediate.core.diagnosis.advice import AdvisorInput, Recommendation
from remediate.core.diagnosis.advisor import advise, oom_command
from remediate.core.diagnosis.findings import KINDS, Diagnosis, Finding, Kind, RunFacts
from remediate.core.diagnosis.parser import parse_journal
from remediate.core.diagnosis.sizes import format_size, parse_size
from remediate.core.diagnosis.torch_oom import GpuProcess, TorchOOM, parse_torch_oom

__all__ = [
    "KINDS",
    "Recommendation",
    "AdvisorInput",
    "advise",
    "oom_command",
    "Diagnosis",
    "Finding",
    "GpuProcess",
    "Kind",
    "RunFacts",
    "TorchOOM",
    "format_size",
    "parse_journal",
    "parse_size",
    "parse_torch_oom",
]
