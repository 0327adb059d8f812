"""The unit-file golden cases (tests/data/unitfile_cases/, the corpus tests/data/unitfile_corpus/; layout in
tests/data/unitfile_cases/README.md): each case's sources, desired state and expected files, and the check that
the edit gives exactly them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.core.unitfile.config import ConfigRead
from remediate.core.unitfile.edit import DesiredState, SourceFile, UnitSources, plan_edit
from remediate.core.unitfile.report import summary_lines, unified_diff
from remediate.errors import ConfigError
from remediate.host.common.probe import load_config

CASES = Path(__file__).resolve().parents[1] / "data" / "unitfile_cases"
FRAGMENT = "/etc/systemd/system/sglang.service"
DROPIN_DIR = "/etc/systemd/system/sglang.service.d/"


def env_path(name: str) -> str:
    """``etc__default__sglang`` -> ``/etc/default/sglang``."""
    return "/" + name.replace("__", "/")


@dataclass
class Case:
    name: str
    dir: Path
    params: dict[str, Any]

    @property
    def fragment_path(self) -> str:
        return str(self.params.get("fragment_path", FRAGMENT))

    def sources(self) -> UnitSources:
        fragment = SourceFile(self.fragment_path, read_text(self.dir / "before.service"))
        dropins = tuple(
            SourceFile(DROPIN_DIR + p.name, read_text(p)) for p in sorted((self.dir / "dropins").glob("*.conf"))
        )
        env: dict[str, str | None] | None = {
            env_path(p.name): read_text(p) for p in sorted((self.dir / "envfiles").glob("*"))
        }
        if self.params.get("env_files_unreadable"):
            env = None
        configs: dict[str, ConfigRead | None] | None = None
        if (self.dir / "configfiles").is_dir():  # --config YAML files as the probe read them (never edited)
            configs = {env_path(p.name): load_config(read_text(p), env_path(p.name))
                       for p in sorted((self.dir / "configfiles").glob("*"))}  # fmt: skip
            configs |= {path: None for path in self.params.get("config_missing", [])}
        return UnitSources(fragment, dropins, env, self.params.get("unit_name"), configs)

    def desired(self) -> DesiredState:
        fields = {k: v for k, v in self.params.items() if k in DesiredState.__dataclass_fields__}
        for key in ("mem_fraction_static", "mem_fraction_step"):
            if fields.get(key) is not None:
                fields[key] = Decimal(str(fields[key]))
        return DesiredState(**fields)

    @property
    def now(self) -> datetime:
        raw = self.params.get("now", "2026-11-29T07:14:22Z")
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).astimezone(UTC)

    def expected(self) -> dict[str, str]:
        """Expected text of every file after the edit (unchanged files included)."""
        out = {self.fragment_path: read_text(self.dir / "after.service")}
        for p in sorted((self.dir / "dropins").glob("*.conf")):
            after = self.dir / "after.dropins" / p.name
            out[DROPIN_DIR + p.name] = read_text(after if after.exists() else p)
        for p in sorted((self.dir / "envfiles").glob("*")):
            after = self.dir / "after.envfiles" / p.name
            out[env_path(p.name)] = read_text(after if after.exists() else p)
        return out


def read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def load_cases(root: Path = CASES) -> list[Case]:
    cases = []
    for d in sorted(root.iterdir()):
        if d.is_dir() and (d / "params.yaml").exists():
            cases.append(Case(d.name, d, yaml.safe_load((d / "params.yaml").read_text()) or {}))
    return cases


def check_golden_case(case: Case) -> None:
    """The case's edit gives its ``after`` files exactly (or its one-line refusal), and a second edit nothing."""
    sources = case.sources()
    error = case.params.get("expect_error")
    if error:
        with pytest.raises(ConfigError) as info:
            plan_edit(sources, case.desired(), now=case.now)
        assert error in str(info.value)
        assert "\n" not in str(info.value)
        return
    plan = plan_edit(sources, case.desired(), now=case.now)
    expected = case.expected()
    got = case_texts(sources) | {f.path: f.new_text for f in plan.files}
    assert got == expected
    assert not set(sources.config_files or {}) & {f.path for f in plan.files}  # the YAML is never written
    for text in case.params.get("expect_changes", []):  # "--flag old->new @ where" lines
        assert text in [f"{c.setting} {c.old}->{c.new} @ {c.where}" for c in plan.changes], plan.changes
    if "expect_before" in case.params:  # the effective values read before: {fraction, prefill}
        want = case.params["expect_before"]
        assert (plan.before.mem_fraction_static, plan.before.chunked_prefill_size) == (
            want.get("fraction"), want.get("prefill"))  # fmt: skip
    for note in case.params.get("expect_notes", []):
        assert any(note in n for n in plan.notes), plan.notes
    if "expect_kept" in case.params:  # what the recipe leaves alone, in the flag summary (core/unitfile/guard.py)
        want = case.params["expect_kept"]
        assert len(plan.kept) == len(want) and all(w in k for w, k in zip(want, plan.kept, strict=True)), plan.kept
        assert all(k in summary_lines(plan) for k in plan.kept)
    for text in case.params.get("expect_diff_contains", []):
        assert any(text in unified_diff(f.path, f.old_text, f.new_text) for f in plan.files)
    for text in case.params.get("expect_diff_lacks", []):
        assert all(text not in unified_diff(f.path, f.old_text, f.new_text) for f in plan.files)
    # Applying the same desired state to the result changes nothing.
    again = plan_edit(_replace(sources, got), case.desired(), now=case.now)
    assert not again.is_changed, again.changes
    assert again.files == ()
    assert again.before == plan.after


def case_texts(sources: UnitSources) -> dict[str, str]:
    """Every file's text (unit files and readable environment files), by path."""
    out = {s.path: s.text for s in sources.unit_files}
    out.update({p: t for p, t in (sources.env_files or {}).items() if t is not None})
    return out


def _replace(sources: UnitSources, texts: dict[str, str]) -> UnitSources:
    env = sources.env_files
    if env is not None:
        env = {p: texts.get(p, t) if t is not None else None for p, t in env.items()}
    return UnitSources(
        SourceFile(sources.fragment.path, texts[sources.fragment.path]),
        tuple(SourceFile(d.path, texts[d.path]) for d in sources.dropins),
        env,
        sources.unit_name,
        sources.config_files,
    )
