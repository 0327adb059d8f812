"""The result types stay typed: no catch-all (``extra``, a ``dict[str, Any]``) in HostResult or any value type of
models.py. Each command's data is a field of its own type; the only maps are the documented ones below, and a
sub-document the pure core builds in its own schema (a finding, a plan) is a ``JsonObject`` named here."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from remediate import models

# name → why a map: keys that are data (a flag's or an environment variable's name, a unit's name)
MAPS = {
    "flags_before": "flag → value",
    "flags_after": "flag → value",
    "env_before": "environment variable → value",
    "env_after": "environment variable → value",
    "unit_states": "unit → its crash state (the JSON's units)",
}
# the core's documents (docs/reference/JSON.md): models.py may not import their types
DOCUMENTS = {"findings", "recommendation", "plan", "source", "gpus", "gpu_processes", "foreign_gpu_processes"}
CATCH_ALL_NAMES = {"extra", "extras", "data", "payload", "details", "misc", "other"}


def untyped_fields(cls: type) -> list[str]:
    """Each field of dataclass ``cls`` that is a catch-all: a catch-all name, ``Any``, an undocumented map or
    an undocumented JSON document."""
    bad = []
    for f in dataclasses.fields(cls):
        kind = str(f.type)
        if f.name in CATCH_ALL_NAMES or "Any" in kind or "object" in kind:
            bad.append(f"{cls.__name__}.{f.name}: {kind}")
        elif "dict[" in kind and f.name not in MAPS:
            bad.append(f"{cls.__name__}.{f.name}: {kind} (an undocumented map)")
        elif "Json" in kind and f.name not in DOCUMENTS:
            bad.append(f"{cls.__name__}.{f.name}: {kind} (an undocumented JSON document)")
    return bad


RESULT_TYPES = [
    cls
    for _, cls in inspect.getmembers(models, inspect.isclass)
    if dataclasses.is_dataclass(cls) and cls.__module__ == models.__name__
]


def test_the_result_types_are_found() -> None:
    names = {cls.__name__ for cls in RESULT_TYPES}
    assert {"HostResult", "StatusReport", "DiagnosisReport", "ProbeReport", "BackupListing"} <= names


@pytest.mark.parametrize("cls", RESULT_TYPES, ids=lambda c: c.__name__)
def test_no_result_type_has_an_untyped_catch_all(cls: type) -> None:
    assert untyped_fields(cls) == []


def test_every_documented_map_and_document_is_a_field() -> None:
    names = {f.name for cls in RESULT_TYPES for f in dataclasses.fields(cls)}
    assert set(MAPS) <= names and DOCUMENTS <= names


@dataclass
class _Regressed:
    host: str
    extra: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    blob: models.JsonObject = field(default_factory=dict)
    flags_before: dict[str, str | None] = field(default_factory=dict)


def test_the_check_catches_a_catch_all() -> None:
    assert [line.split(":")[0] for line in untyped_fields(_Regressed)] == [
        "_Regressed.extra",
        "_Regressed.notes",
        "_Regressed.blob",
    ]
