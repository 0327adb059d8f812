"""PURE: the headroom a diagnosed prefill spike needs, and the largest fraction that still keeps it.

A runtime CUDA OOM names the allocation that failed (``tried_bytes``), what was free on the device and
what torch held reserved but unallocated. For a prefill of ``prefill_tokens`` tokens the spike per token
is ``tried_bytes / prefill_tokens``; chunking caps the largest forward at the chunk, so the spike becomes
``per_token * chunk``. Reserved-but-unallocated memory is fragmentation that cannot serve a fresh block
unless expandable segments are on. What the headroom ``free0 * (1 - f)`` holds besides free memory (the
request pool, workspaces, CUDA graphs) is fixed across fractions, so the crash tells it too::

    overhead   = free0 * (1 - f_crash) - free_bytes - reserved_unallocated
    usable(f)  = free0 * (1 - f) - overhead
    need       = per_token * chunk + (reserved_unallocated unless expandable segments)
    fits(f)    = usable(f) >= need * (1 + margin)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from remediate.core.capacity.pool import GIB, BudgetModel, Prediction

_CHUNK_FLOOR = 256  # smaller chunks than this make long prefills impractically slow


@dataclass(frozen=True)
class Spike:
    """A diagnosed runtime OOM as plain numbers (bytes); ``fraction`` is what the crashed server ran with."""

    tried_bytes: int
    prefill_tokens: int | None
    free_bytes: int
    reserved_unallocated_bytes: int
    fraction: float | None = None

    @property
    def per_token_bytes(self) -> float | None:
        if not self.prefill_tokens or self.prefill_tokens <= 0:
            return None
        return self.tried_bytes / self.prefill_tokens

    def spike_bytes(self, chunked_prefill_size: int | None) -> int:
        """The largest forward's allocation: the chunk when chunking is on, else the diagnosed prefill."""
        per_token = self.per_token_bytes
        if per_token is None or chunked_prefill_size is None or chunked_prefill_size <= 0:
            return self.tried_bytes
        return math.ceil(per_token * chunked_prefill_size)

    def need_bytes(self, knobs: Knobs) -> int:
        unrecovered = 0 if knobs.is_expandable else self.reserved_unallocated_bytes
        return self.spike_bytes(knobs.chunked_prefill_size) + unrecovered


@dataclass(frozen=True)
class Knobs:
    """The settings that decide the spike: the prefill chunk (None/<=0: off) and expandable segments."""

    chunked_prefill_size: int | None = None
    is_expandable: bool = False

    def describe(self) -> str:
        chunk = self.chunked_prefill_size
        text = f"chunk {chunk}" if chunk and chunk > 0 else "no chunking"
        return text + (", expandable segments" if self.is_expandable else "")


@dataclass(frozen=True)
class Fit:
    need_bytes: int
    usable_bytes: int
    fits: bool  # usable >= need * (1 + margin)

    @property
    def spare_bytes(self) -> int:
        return self.usable_bytes - self.need_bytes

    @property
    def margin(self) -> float:
        """Spare memory as a share of the need (0.10 = 10% more than needed)."""
        return self.spare_bytes / self.need_bytes if self.need_bytes else math.inf


@dataclass(frozen=True)
class Row:
    prediction: Prediction
    usable_bytes: int | None
    current: Fit | None  # with the knobs the server runs with
    proposed: Fit | None  # with the proposed knobs
    is_current: bool = False
    is_chosen: bool = False

    @property
    def fraction(self) -> float:
        return self.prediction.fraction


@dataclass(frozen=True)
class Remedy:
    """Another setting that would let the target and the headroom both be met."""

    flag: str  # "--chunked-prefill-size" / "--max-running-requests"
    value: int
    reason: str


@dataclass(frozen=True)
class BudgetPlan:
    rows: tuple[Row, ...]
    chosen: Row | None
    proposed: Knobs
    margin: float
    target_tokens: int | None = None
    target_fraction: float | None = None  # the smallest grid fraction whose pool reaches the target
    meets_target: bool | None = None
    shortfall_tokens: int | None = None  # target - chosen pool, when the target is missed
    short_bytes: int | None = None  # headroom missing at the target fraction
    remedies: tuple[Remedy, ...] = ()
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def overhead_gib(model: BudgetModel, spike: Spike | None) -> float | None:
    """What the headroom holds besides free memory: from the crash when known, else the capacity line."""
    if spike is not None and spike.fraction is not None:
        free_gib = (spike.free_bytes + spike.reserved_unallocated_bytes) / GIB
        return model.free0_gib * (1.0 - spike.fraction) - free_gib
    return model.overhead_gib


def grid(centre: float, model: BudgetModel, step: float = 0.01, top: float = 0.99) -> list[float]:
    """Fractions ``centre + k*step`` from just below the minimum viable one up to ``top`` (high to low)."""
    low = model.min_viable_fraction() - step
    if not math.isfinite(low):
        return []
    k_max = math.floor((top - centre) / step + 1e-9)
    k_min = math.ceil((max(low, step) - centre) / step - 1e-9)
    return [round(centre + k * step, 4) for k in range(k_max, k_min - 1, -1)]


def _fit(usable: int | None, need: int, margin: float) -> Fit | None:
    if usable is None:
        return None
    return Fit(need, usable, usable >= need * (1.0 + margin))


def choose(
    model: BudgetModel,
    spike: Spike | None,
    *,
    centre: float,
    current: Knobs,
    proposed: Knobs,
    target_tokens: int | None = None,
    margin: float = 0.10,
    max_running_requests: int | None = None,
    step: float = 0.01,
    span: int = 3,
) -> BudgetPlan:
    """The LARGEST grid fraction whose usable headroom covers the spike's need with ``margin``."""
    overhead = overhead_gib(model, spike)
    sized = model if overhead is None else _with_overhead(model, overhead)
    rows: list[Row] = []
    for fraction in grid(centre, model, step):
        prediction = sized.predict(fraction)
        usable = sized.usable_bytes(fraction) if prediction.is_viable else None
        cur = _fit(usable, spike.need_bytes(current), margin) if spike else None
        new = _fit(usable, spike.need_bytes(proposed), margin) if spike else None
        rows.append(Row(prediction, usable, cur, new, is_current=abs(fraction - centre) < 1e-9))
    reasons: list[str] = []
    warnings: list[str] = []
    target_row = _target_row(rows, target_tokens)
    target_fraction = target_row.fraction if target_row else None
    if target_tokens is not None and target_row is None:
        warnings.append(f"no fraction up to {rows[0].fraction if rows else 0.99:g} reaches {target_tokens:,} tokens")
    chosen = next((r for r in rows if r.proposed is not None and r.proposed.fits), None) if spike else None
    if spike is None:
        reasons.append("no diagnosed runtime OOM: nothing to size the headroom against")
    elif overhead is None:
        reasons.append("the fixed overhead in the headroom is unknown (no crash fraction, no capacity line)")
    elif chosen is None:
        warnings.append(
            f"no fraction keeps {spike.need_bytes(proposed) / GIB:.2f} GiB usable for {proposed.describe()}"
        )
    else:
        reasons.extend(_arithmetic(spike, proposed, overhead, chosen, margin))
    rows = [_mark(r, chosen) for r in rows]
    chosen = next((r for r in rows if r.is_chosen), None)
    window = [r for r in rows if abs(r.fraction - centre) <= span * step + 1e-9 or r.is_chosen or r is target_row]
    plan = BudgetPlan(tuple(window), chosen, proposed, margin, target_tokens, target_fraction, reasons=tuple(reasons))
    if target_tokens is None or chosen is None:
        return _replace_plan(plan, warnings=tuple(warnings))
    if chosen.prediction.tokens >= target_tokens:
        return _replace_plan(plan, meets_target=True, warnings=tuple(warnings))
    short_tokens = target_tokens - chosen.prediction.tokens
    warnings.append(
        f"the target {target_tokens:,} tokens and the headroom the spike needs cannot both be met: "
        f"{chosen.fraction:g} gives {chosen.prediction.tokens:,} "
        f"(\N{MINUS SIGN}{short_tokens / target_tokens * 100:.1f}%)"
    )
    short_bytes = None
    remedies: tuple[Remedy, ...] = ()
    if target_row is not None and target_row.proposed is not None and spike is not None:
        fit = target_row.proposed
        short_bytes = max(0, math.ceil(fit.need_bytes * (1.0 + margin)) - fit.usable_bytes)
        warnings.append(
            f"{target_row.fraction:g} ({target_row.prediction.tokens:,} tokens) would leave "
            f"{fit.usable_bytes / GIB:.2f} GiB usable against {fit.need_bytes / GIB:.2f} GiB needed "
            f"(+{margin:.0%}): {short_bytes / GIB:.2f} GiB short"
        )
        remedies = _remedies(sized, spike, proposed, target_row, margin, short_bytes, max_running_requests)
    return _replace_plan(
        plan,
        meets_target=False,
        shortfall_tokens=short_tokens,
        short_bytes=short_bytes,
        remedies=remedies,
        warnings=tuple(warnings),
    )


def _with_overhead(model: BudgetModel, overhead: float) -> BudgetModel:
    return replace(model, overhead_gib=overhead)


def _replace_plan(plan: BudgetPlan, **changes: object) -> BudgetPlan:
    return replace(plan, **changes)  # type: ignore[arg-type]


def _mark(row: Row, chosen: Row | None) -> Row:
    if chosen is None or row is not chosen:
        return row
    return replace(row, is_chosen=True)


def _target_row(rows: list[Row], target_tokens: int | None) -> Row | None:
    if target_tokens is None:
        return None
    reaching = [r for r in rows if r.prediction.is_viable and r.prediction.tokens >= target_tokens]
    return reaching[-1] if reaching else None  # rows run high to low: the last is the smallest fraction


def _arithmetic(spike: Spike, proposed: Knobs, overhead: float, chosen: Row, margin: float) -> list[str]:
    lines: list[str] = []
    per_token = spike.per_token_bytes
    if per_token is not None:
        lines.append(
            f"spike {spike.tried_bytes / 2**20:.0f} MiB / {spike.prefill_tokens:,} tokens = "
            f"{per_token / 1024:.1f} KiB per prefill token; at {proposed.describe()}: "
            f"{spike.spike_bytes(proposed.chunked_prefill_size) / 2**20:.0f} MiB"
        )
    else:
        lines.append(f"spike {spike.tried_bytes / 2**20:.0f} MiB (prefill size unknown: chunking not credited)")
    frag = spike.reserved_unallocated_bytes / 2**20
    lines.append(
        f"fragmentation {frag:.0f} MiB reserved but unallocated at the crash (it grows with traffic): "
        + ("recovered by expandable segments" if proposed.is_expandable else "not recovered (no expandable segments)")
    )
    lines.append(f"fixed overhead in the headroom {overhead:.2f} GiB (request pool, workspaces, CUDA graphs)")
    fit = chosen.proposed
    if fit is not None:
        lines.append(
            f"{chosen.fraction:g}: usable {fit.usable_bytes / GIB:.2f} GiB >= need {fit.need_bytes / GIB:.2f} GiB "
            f"+ {margin:.0%} (the largest fraction that does)"
        )
    return lines


def _remedies(
    model: BudgetModel,
    spike: Spike,
    proposed: Knobs,
    target: Row,
    margin: float,
    short_bytes: int,
    max_running_requests: int | None,
) -> tuple[Remedy, ...]:
    remedies: list[Remedy] = []
    usable = target.usable_bytes or 0
    per_token = spike.per_token_bytes
    unrecovered = 0 if proposed.is_expandable else spike.reserved_unallocated_bytes
    if per_token:
        budget = usable / (1.0 + margin) - unrecovered
        chunk = 1 << max(0, math.floor(math.log2(budget / per_token))) if budget > per_token else 0
        current_chunk = proposed.chunked_prefill_size or 0
        if chunk >= _CHUNK_FLOOR and (current_chunk <= 0 or chunk < current_chunk):
            remedies.append(
                Remedy(
                    "--chunked-prefill-size", chunk, f"a {chunk}-token chunk needs {per_token * chunk / 2**20:.0f} MiB"
                )
            )
    context_len = model.context_len
    if context_len and short_bytes > 0:
        tokens = target.prediction.tokens
        slots = max_running_requests or min(max(int(tokens / context_len * 512), 2048), 4096)
        per_slot = (context_len + 4) * 4  # the req_to_token pool: one int32 row of context_len + 4 per request
        fewer = slots - math.ceil(short_bytes / per_slot)
        fewer = fewer // 16 * 16
        if fewer >= 16:
            remedies.append(
                Remedy(
                    "--max-running-requests",
                    fewer,
                    f"frees {(slots - fewer) * per_slot / GIB:.2f} GiB of the request pool: {slots} → {fewer} slots",
                )
            )
    return tuple(remedies)
