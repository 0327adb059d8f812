"""The pure planner: from the unit's sources and a desired state to exact text edits.

Every edit replaces only value characters (or inserts a flag, an option or one line), so bytes that
are not part of the change stay as they were. The plan is checked by reading the result back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from remediate.core.engines import SGLANG, Engine
from remediate.core.unitfile.alloc import ALLOC, ALLOC_NEW, alloc_value, plan_alloc
from remediate.core.unitfile.argv import ArgItem, FlagHit, ServerCommand, find_flags
from remediate.core.unitfile.envfile import EnvAssignment
from remediate.core.unitfile.guard import guard_alloc
from remediate.core.unitfile.knobs import refuse_abbreviations, refuse_config_owned, refuse_kv_bytes
from remediate.core.unitfile.model import TextEdit, apply_edits, removal
from remediate.core.unitfile.sources import Service, SourceFile, UnitSources, load_service, runs_sglang
from remediate.errors import ConfigError, OwnedElsewhereError

__all__ = [
    "Change", "DesiredState", "UnitEdit", "FileEdit", "UnitSettings", "SourceFile", "UnitSources",
    "find_server_exec", "plan_edit", "read_settings", "runs_sglang", "validate_desired",
]  # fmt: skip

FRACTION = "--mem-fraction-static"  # sglang's; an engine's own: Engine.fraction_option
CHUNK = "--chunked-prefill-size"
# The marker names the engine's fraction flag: ``mem-fraction-static`` (sglang), ``gpu-memory-utilization`` (vLLM).
# A value overridden on the command line names where it was: `` (from --config /etc/sglang/k26.yaml)``.
MARKER = re.compile(r"^[ \t]*# remediate: oom (\S+) [a-z-]+ (\S+)->(\S+)(?: \(from [^\r\n()]*\))?[ \t]*(?=\r?$)",
                    re.MULTILINE)  # fmt: skip
_ALLOC_SYNTAX = re.compile(r"^[A-Za-z0-9_]+:[A-Za-z0-9_.+-]+(,[A-Za-z0-9_]+:[A-Za-z0-9_.+-]+)*$")


@dataclass(frozen=True)
class DesiredState:
    """What ``oom`` sets, engine-neutral: the memory fraction (sglang --mem-fraction-static, vLLM
    --gpu-memory-utilization), the prefill bound (--chunked-prefill-size, --max-num-batched-tokens), the alloc conf."""

    mem_fraction_static: Decimal | None = None  # absolute value to set, exclusive (0, 1)
    mem_fraction_step: Decimal = Decimal("0.01")  # used only when mem_fraction_static is None
    chunked_prefill_size: int | None = 4096  # None = leave alone; -1 = disable
    chunk_is_ceiling: bool = True  # keep an existing smaller positive chunk
    alloc_conf: str | None = "expandable_segments:True"  # key:value options to ensure; None = leave alone
    # (engine, fraction, prefill) from keys named for one engine (inventory gpu_memory_utilization): its units only
    for_engine: tuple[tuple[str, Decimal | None, int | None], ...] = ()
    # the running release's own default fraction for a unit that sets none (core/engines/vllm/defaults.py; None:
    # the engine's table default, Engine.fraction_default)
    fraction_default: Decimal | None = None

    def with_fraction_default(self, default: Decimal) -> DesiredState:
        return replace(self, fraction_default=default)

    def resolved_for(self, engine: str) -> DesiredState:
        """The values for a unit of ``engine``: its own keys' over the neutral ones."""
        for name, fraction, prefill in self.for_engine:
            if name == engine:
                fraction = self.mem_fraction_static if fraction is None else fraction
                ceiling = self.chunk_is_ceiling if prefill is None else False
                prefill = self.chunked_prefill_size if prefill is None else prefill
                return replace(self, mem_fraction_static=fraction, chunked_prefill_size=prefill,
                               chunk_is_ceiling=ceiling, for_engine=())  # fmt: skip
        return replace(self, for_engine=())


@dataclass(frozen=True)
class UnitSettings:
    """Effective values, as strings exactly as written (None = unset)."""

    mem_fraction_static: str | None  # the engine's fraction flag (vLLM: --gpu-memory-utilization)
    chunked_prefill_size: str | None  # the engine's prefill bound (vLLM: --max-num-batched-tokens)
    alloc_conf: str | None
    engine: str = SGLANG.name


@dataclass(frozen=True)
class Change:
    setting: str
    old: str | None
    new: str | None
    path: str
    where: str


@dataclass(frozen=True)
class FileEdit:
    path: str
    old_text: str
    new_text: str
    created: bool = False  # a new file (remediate's instance drop-in): no old bytes


@dataclass(frozen=True)
class UnitEdit:
    files: tuple[FileEdit, ...]
    changes: tuple[Change, ...]
    notes: tuple[str, ...]
    before: UnitSettings
    after: UnitSettings
    kept: tuple[str, ...] = ()  # settings the recipe leaves alone on this unit, each with why (the flag summary)

    @property
    def is_changed(self) -> bool:
        return bool(self.files)


def validate_desired(desired: DesiredState) -> None:
    """Reject values sglang or PyTorch would not take (ConfigError)."""
    fraction = desired.mem_fraction_static
    if fraction is not None and not (fraction.is_finite() and Decimal(0) < fraction < Decimal(1)):
        raise ConfigError(f"--mem-fraction-static must be between 0 and 1 (exclusive), got {fraction}")
    step = desired.mem_fraction_step
    if not (step.is_finite() and Decimal(0) < step < Decimal(1)):
        raise ConfigError(f"--mem-fraction-step must be between 0 and 1 (exclusive), got {step}")
    chunk = desired.chunked_prefill_size
    if chunk is not None and chunk < 1 and chunk != -1:
        raise ConfigError(f"--chunked-prefill-size must be >= 1, or -1 to disable, got {chunk}")
    if desired.alloc_conf is not None and not _ALLOC_SYNTAX.fullmatch(desired.alloc_conf):
        raise ConfigError(f"alloc conf must look like key:value[,key:value], got {desired.alloc_conf!r}")


def find_server_exec(sources: UnitSources) -> tuple[str, int, ServerCommand]:
    """(path, line number, command) of the one effective ``ExecStart=`` that runs the server."""
    service = load_service(sources)
    return service.exec_start.path, service.exec_start.directive.first_line.number, service.command


@dataclass
class _Plan:
    service: Service
    edits: dict[str, list[TextEdit]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def engine(self) -> Engine:
        return self.service.engine

    def hits(self, items: Sequence[ArgItem], name: str) -> list[FlagHit]:
        return find_flags(items, name, resolve=self.engine.resolve_flag, bool_flags=self.engine.bool_flags)

    def add(self, path: str, edit: TextEdit) -> None:
        self.edits.setdefault(path, []).append(edit)

    def text(self, path: str) -> str:
        for source in self.service.sources.unit_files:
            if source.path == path:
                return source.text
        env = self.service.sources.env_files or {}
        return env.get(path) or ""


def _last_hit(items: Sequence[ArgItem], hits: list[FlagHit], setting: str) -> FlagHit | None:
    """The winning occurrence; raise when a ``$VAR`` we cannot read could override it."""
    start = (hits[-1].value if hits[-1].value is not None else hits[-1].flag) + 1 if hits else 0
    for item in items[start:]:
        if item.opaque is not None:
            raise OwnedElsewhereError(setting, item.opaque, source=item.path)
    if hits and hits[-1].value_chars is None and hits[-1].value_text is not None:
        holder = items[hits[-1].value if hits[-1].value is not None else hits[-1].flag]
        if holder.config is not None:
            return hits[-1]  # the --config file's: the command line overrides it (_override_config)
        raise OwnedElsewhereError(setting, f"{holder.text} in {holder.where}", source=holder.path)
    return hits[-1] if hits else None


def _set_flag(plan: _Plan, items: list[ArgItem], hits: list[FlagHit], hit: FlagHit, value: str) -> None:
    """Write ``value`` into the winning occurrence and drop earlier ones of the same source."""
    holder = items[hit.value if hit.value is not None else hit.flag]
    if hit.value_text != value:
        assert hit.value_chars is not None
        if len(hit.value_chars):
            start, end = hit.value_chars.span_of(0, len(hit.value_chars))
        else:
            start = end = hit.eq_point if hit.eq_point is not None else holder.span[1]
        plan.add(holder.path, TextEdit(start, end, value))
    _drop_repeats(plan, items, hits)


def _drop_repeats(plan: _Plan, items: list[ArgItem], hits: list[FlagHit]) -> None:
    last = items[hits[-1].flag]
    for hit in hits[:-1]:
        flag = items[hit.flag]
        end_item = items[hit.value] if hit.value is not None else flag
        if flag.path != last.path or flag.where != last.where or flag.chars is None or end_item.chars is None:
            continue  # only tidy the source that holds the winning occurrence
        text = plan.text(flag.path)
        plan.add(flag.path, removal(text, flag.span[0], end_item.span[1], flag.prev_end))
        plan.notes.append(f"removed an earlier --{hit.name} {hit.value_text} ({flag.where})")


def _markers(sources: UnitSources) -> list[tuple[str, re.Match[str]]]:
    found: list[tuple[str, re.Match[str]]] = []
    texts = [(s.path, s.text) for s in sources.unit_files]
    texts += [(path, text) for path, text in (sources.env_files or {}).items() if text is not None]
    for path, text in texts:
        found.extend((path, match) for match in MARKER.finditer(text))
    return found


def _decimal(text: str | None, where: str, path: str, option: str = FRACTION) -> Decimal:
    try:
        value = Decimal(text or "")
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite():
        raise ConfigError(f"{option} {text!r} in {where} is not a number", source=path)
    return value


def _plan_fraction(plan: _Plan, desired: DesiredState, items: list[ArgItem], now: datetime) -> None:
    engine = plan.engine
    option = engine.fraction_option
    hits = plan.hits(items, engine.fraction_flag)
    hit = _last_hit(items, hits, option)
    sources = plan.service.sources
    if hit is None or hit.value_text is None:
        default = engine.fraction_default
        if default is not None and desired.fraction_default is not None:
            default = desired.fraction_default  # the detected release's own (an engine with a default only)
        if desired.mem_fraction_static is None and default is None:
            config = plan.service.config
            where = "in the unit"
            if config is not None:
                where = (f"on the command line or in --config {config.path}" if config.words is not None else
                         f"on the command line, and --config {config.path} is {config.unread}")  # fmt: skip
            raise ConfigError(f"no {option} {where}: pass --mem-fraction-static to set one",
                              source=plan.service.exec_start.path)  # fmt: skip
        refuse_config_owned(plan.service, plan.hits(items, "config"), engine.fraction_flag,
                            explicit=desired.mem_fraction_static is not None)  # fmt: skip
        markers = _markers(sources)
        if desired.mem_fraction_static is not None:
            target = desired.mem_fraction_static
        else:
            # The engine's own default (vLLM: 0.9) lowered by one step, written explicitly.
            assert default is not None
            target = _stepped(default, desired, f"{option} (default {default})", plan.service.exec_start.path)
        new_text = format(target, "f")
        _append_flag(plan, option, new_text)
        anchor = plan.service.exec_start.directive.first_line.start
        path = plan.service.exec_start.path
        _write_marker(plan, path, anchor, "unset", new_text, markers, now)
        return
    holder = items[hit.value if hit.value is not None else hit.flag]
    current = _decimal(hit.value_text, holder.where, holder.path, option)
    markers = _markers(sources)
    if desired.mem_fraction_static is not None:
        target = desired.mem_fraction_static
    elif any(_same(match.group(3), current) for _, match in markers):
        target = current  # an earlier run already lowered it: do not step again
    else:
        target = _stepped(current, desired, f"{option} {hit.value_text}", holder.path)
    new_text = hit.value_text if target == current else format(target, "f")
    if holder.config is not None:
        if new_text != hit.value_text:
            _override_config(plan, option, hit.value_text, new_text, holder.config)
            exec_start = plan.service.exec_start
            _write_marker(plan, exec_start.path, exec_start.directive.first_line.start, hit.value_text, new_text,
                          markers, now, origin=f"--config {holder.config}")  # fmt: skip
        return
    _set_flag(plan, items, hits, hit, new_text)
    if new_text == hit.value_text:
        return
    plan.changes.append(Change(option, hit.value_text, new_text, holder.path, holder.where))
    _write_marker(plan, holder.path, holder.anchor, hit.value_text, new_text, markers, now)


def _override_config(plan: _Plan, option: str, old: str, new: str, config: str) -> None:
    """The value lives in the ``--config`` YAML: the new one goes on the command line, which the engine reads
    after the file (docs/UNITS.md says why the YAML is left as it is); the change names the value it
    overrides."""
    _append_flag(plan, option, new)
    appended = plan.changes.pop()
    where = f"{appended.where}, over {option[2:]}: {old} in --config {config}"
    plan.changes.append(Change(option, old, new, appended.path, where))


def _stepped(current: Decimal, desired: DesiredState, what: str, path: str) -> Decimal:
    target = current - desired.mem_fraction_step
    if target <= 0:
        raise ConfigError(f"lowering {what} by {desired.mem_fraction_step} reaches 0", source=path)
    return target


def _write_marker(
    plan: _Plan,
    path: str,
    anchor: int,
    old: str,
    new: str,
    markers: list[tuple[str, re.Match[str]]],
    now: datetime,
    *,
    origin: str | None = None,
) -> None:
    """Put the one marker line directly above the line at ``anchor``, replacing any other (``origin``: where the
    old value was written, when not where the new one goes)."""
    holder_path = path
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = plan.text(holder_path)
    eol = "\r\n" if "\r\n" in text else "\n"
    line = f"# remediate: oom {stamp} {plan.engine.fraction_flag} {old}->{new}"
    if origin is not None:
        line += f" (from {origin})"
    above = text.rfind("\n", 0, max(anchor - 1, 0)) + 1 if anchor else 0
    replaced = False
    for marker_path, match in markers:
        if marker_path == holder_path and match.start() == above and anchor:
            plan.add(marker_path, TextEdit(match.start(), match.end(), line))
            replaced = True
        else:
            rest = plan.text(marker_path)[match.end() :]
            marker_end = match.end() + (len(eol) if rest.startswith(eol) else 0)
            plan.add(marker_path, TextEdit(match.start(), marker_end, ""))
    if not replaced:
        plan.add(holder_path, TextEdit(anchor, anchor, line + eol))


def _same(text: str, value: Decimal) -> bool:
    try:
        return Decimal(text) == value
    except InvalidOperation:
        return False


def _append_flag(plan: _Plan, setting: str, value: str) -> None:
    """Add ``setting value`` after the last word of the server's argv, on that word's line."""
    command = plan.service.command
    items = plan.service.items()
    holder = items[-1].holder if items else None
    if holder is not None and _can_grow(plan, items[-1].path, holder):
        # The flags live in a variable (``$SGLANG_ARGS``): the new one goes there too, not after it.
        point = holder.value_end_point()
        plan.add(items[-1].path, TextEdit(point, point, f" {setting} {value}"))
        plan.changes.append(Change(setting, None, value, items[-1].path, items[-1].where))
        return
    path = plan.service.exec_start.path
    point = command.last_word.file_span[1]
    plan.add(path, TextEdit(point, point, f" {setting} {value}"))
    plan.changes.append(Change(setting, None, value, path, command.kind))


def _can_grow(plan: _Plan, path: str, holder: EnvAssignment) -> bool:
    """True when words can be appended to the value in place: an EnvironmentFile= line, or a quoted
    ``Environment="NAME=…"`` (an unquoted one would split into two assignments)."""
    if path not in plan.service.units:
        return True
    return plan.text(path)[holder.span[0] : holder.span[0] + 1] in "\"'" and holder.span[1] > holder.span[0]


def _plan_chunk(plan: _Plan, desired: DesiredState, items: list[ArgItem]) -> None:
    wanted = desired.chunked_prefill_size
    if wanted is None:
        return
    engine = plan.engine
    option = engine.prefill_option
    if wanted < 1 and not engine.prefill_can_disable:
        raise ConfigError(f"{option} must be >= 1 for a {engine.label} unit, got {wanted}")
    hits = plan.hits(items, engine.prefill_flag)
    hit = _last_hit(items, hits, option)
    if hit is None or hit.value_text is None:
        refuse_config_owned(plan.service, plan.hits(items, "config"), engine.prefill_flag, explicit=False)
        _append_flag(plan, option, str(wanted))
        return
    holder = items[hit.value if hit.value is not None else hit.flag]
    try:
        current = int(hit.value_text)
    except ValueError:
        raise ConfigError(
            f"{option} {hit.value_text!r} in {holder.where} is not an integer", source=holder.path
        ) from None
    keep = desired.chunk_is_ceiling and wanted > 0 and 0 < current <= wanted
    new_text = hit.value_text if keep or current == wanted else str(wanted)
    if holder.config is not None:
        if new_text != hit.value_text:
            _override_config(plan, option, hit.value_text, new_text, holder.config)
        return
    _set_flag(plan, items, hits, hit, new_text)
    if new_text != hit.value_text:
        plan.changes.append(Change(option, hit.value_text, new_text, holder.path, holder.where))


def _plan_alloc(plan: _Plan, desired: DesiredState) -> None:
    if desired.alloc_conf is None:
        return
    edits, changes = plan_alloc(plan.service, desired.alloc_conf)
    for path, edit in edits:
        plan.add(path, edit)
    plan.changes += [Change(c.name, c.old, c.new, c.path, c.where) for c in changes]


def _flag_value(items: list[ArgItem], name: str, engine: Engine) -> str | None:
    hits = find_flags(items, name, resolve=engine.resolve_flag, bool_flags=engine.bool_flags)
    hit = _last_hit(items, hits, f"--{name}")
    return hit.value_text if hit is not None else None


def read_settings(sources: UnitSources) -> UnitSettings:
    """Effective values the server would see (raises like ``plan_edit`` when they cannot be known)."""
    service = load_service(sources)
    items = service.items()
    refuse_abbreviations(service, items)
    engine = service.engine
    return UnitSettings(
        _flag_value(items, engine.fraction_flag, engine),
        _flag_value(items, engine.prefill_flag, engine),
        alloc_value(service),
        engine.name,
    )


def _apply(sources: UnitSources, edits: dict[str, list[TextEdit]]) -> UnitSources:
    def new(source: SourceFile) -> SourceFile:
        return SourceFile(source.path, apply_edits(source.text, edits.get(source.path, [])))

    env_files = sources.env_files
    if env_files is not None:
        env_files = {p: (apply_edits(t, edits.get(p, [])) if t is not None else None) for p, t in env_files.items()}
    return UnitSources(new(sources.fragment), tuple(new(d) for d in sources.dropins), env_files, sources.unit_name,
                       sources.config_files)  # fmt: skip


def plan_edit(sources: UnitSources, desired: DesiredState, *, now: datetime) -> UnitEdit:
    """Plan the edits that bring the service to ``desired`` (pure; raises ConfigError)."""
    service = load_service(sources)
    desired = desired.resolved_for(service.engine.name)
    validate_desired(desired)
    alloc_conf, kept = guard_alloc(service, desired.alloc_conf)
    desired = replace(desired, alloc_conf=alloc_conf)
    before = read_settings(sources)
    plan = _Plan(service)
    items = service.items()
    refuse_kv_bytes(service, items)  # vLLM sized in bytes: the utilization (the recipe's knob) sizes nothing
    # The alloc line is planned first: at a shared insertion point the marker must come last,
    # directly above the directive it describes.
    _plan_alloc(plan, desired)
    _plan_fraction(plan, desired, items, now)
    _plan_chunk(plan, desired, items)
    engine = service.engine
    order = {engine.fraction_option: 0, engine.prefill_option: 1, ALLOC: 2, ALLOC_NEW: 3}
    plan.changes.sort(key=lambda change: order[change.setting])
    config = service.config
    for change in plan.changes:
        if config is not None and config.words is None and change.setting.startswith("--"):
            plan.notes.append(
                f"{change.setting} on the command line overrides any value in --config {config.path} ({config.unread})"
            )
    new_sources = _apply(sources, plan.edits)
    after = read_settings(new_sources)
    old_texts = {s.path: s.text for s in sources.unit_files} | {
        p: t for p, t in (sources.env_files or {}).items() if t is not None
    }
    new_texts = {s.path: s.text for s in new_sources.unit_files} | {
        p: t for p, t in (new_sources.env_files or {}).items() if t is not None
    }
    files = tuple(FileEdit(p, old_texts[p], new_texts[p]) for p in old_texts if old_texts[p] != new_texts[p])
    notes = tuple(dict.fromkeys([*service.notes, *plan.notes]))
    return UnitEdit(files, tuple(plan.changes), notes, before, after, (kept,) if kept else ())
