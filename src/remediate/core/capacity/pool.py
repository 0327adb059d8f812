"""PURE: sglang's KV-pool arithmetic for any ``--mem-fraction-static``, and the headroom a prefill needs.

sglang sizes the pool at startup (``profile_max_num_token``)::

    rest   = free1 - free0 * (1 - f)                 # GiB; free0/free1 = free before/after weights (min over ranks)
    tokens = floor(rest * 2**30 / cell)              # cell = KV bytes per token per rank
    tokens = min(tokens, --max-total-tokens) // page_size * page_size
    tokens <= 0  ->  "Not enough memory. Please try to increase --mem-fraction-static."

and whatever is not weights or KV, ``free0 * (1 - f)``, is the headroom that must hold the request
pool, workspaces, CUDA graphs and the activations of a prefill. The model is built from the numbers a
server logs (:mod:`remediate.core.startup`); the running server's own pool (exact) anchors it, so the
two-decimal rounding of the logged GiB only affects the slope. Observations of earlier starts on the
same host and model correct it further (:func:`calibrate`).

A speculative server also runs a draft model (:class:`DraftShare`): its own weights and its own KV pool of
the target's token count (the draft worker reuses the target's ``max_total_num_tokens``). sglang 0.5.23
counts both before it sizes the pool (mem_cache/kv_cache_configurator.py ``_profile_available_bytes``:
"Loaded weights (target + draft)"; model_executor/pool_configurator.py adds the draft's bytes per token
to the target's cell), so ``tokens = rest / (cell + draft_cell)`` with ``free1`` after both weights.
0.4.6.post5 did not (model_executor/model_runner.py ``init_memory_pool``: the target profiles alone, adds
``max_num_reqs * (steps * topk + draft_tokens) + 100`` tokens, and the draft worker then allocates its
weights and a pool of that many tokens out of the headroom ``free0 * (1 - f)``): the uncounted draft.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from remediate.core.numbers import as_float, as_int
from remediate.core.startup import ServerSettings, StartupNumbers

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class Prediction:
    """The pool sglang would allocate at one fraction; ``is_viable`` False is the startup failure."""

    fraction: float
    tokens: int  # max_total_num_tokens (0 when the server would not start)
    is_viable: bool
    is_capped: bool  # --max-total-tokens decided the size
    max_req_input_len: int  # 0 when not viable
    headroom_bytes: int  # free0 * (1 - f)

    @property
    def failure(self) -> str | None:
        if self.is_viable:
            return None
        return f"Not enough memory. Please try to increase --mem-fraction-static. (at {self.fraction:g})"


@dataclass(frozen=True)
class DraftShare:
    """The draft model's weights (GiB per rank) and KV cell (bytes per token per rank) next to the target's.

    ``is_counted``: the target's pool was sized after the draft's weights and with its cell (sglang 0.5.23);
    False: the draft takes its weights and pool out of the headroom afterwards (0.4.6.post5), and
    ``extra_tokens`` is the speculative headroom the target added to its profiled pool.
    """

    weights_gib: float
    cell_bytes: float
    is_counted: bool = True
    extra_tokens: int = 0

    def pool_bytes(self, tokens: int) -> int:
        return int(tokens * self.cell_bytes)


@dataclass(frozen=True)
class BudgetModel:
    """free0/free1 (GiB per rank), the KV cell (bytes per token per rank), page size and caps."""

    free0_gib: float
    free1_gib: float
    cell_bytes: float
    page_size: int = 1
    max_total_tokens: int | None = None  # --max-total-tokens
    context_len: int | None = None  # the model's context length, as the server resolved it
    overhead_gib: float | None = None  # request pool + workspaces + graphs: headroom minus usable free memory
    anchor: tuple[float, int] | None = None  # (fraction, tokens) the running server measured
    notes: tuple[str, ...] = ()
    draft: DraftShare | None = None  # speculative decoding: the draft model's weights and cell

    @property
    def sizing_cell_bytes(self) -> float:
        """The bytes per token the pool is divided by: the target's, plus the draft's when it is counted."""
        if self.draft is not None and self.draft.is_counted:
            return self.cell_bytes + self.draft.cell_bytes
        return self.cell_bytes

    def raw_tokens(self, fraction: float) -> float:
        """sglang's unrounded token count at ``fraction`` (negative: weights leave no room)."""
        rest = self.free1_gib - self.free0_gib * (1.0 - fraction)
        return rest * GIB / self.sizing_cell_bytes

    def _extra_tokens(self) -> int:
        return self.draft.extra_tokens if self.draft is not None and not self.draft.is_counted else 0

    def draft_bytes(self, tokens: int) -> int:
        """What the draft holds at a pool of ``tokens``: its weights and its pool (0 without a draft)."""
        if self.draft is None:
            return 0
        return int(self.draft.weights_gib * GIB) + self.draft.pool_bytes(tokens)

    def headroom_bytes(self, fraction: float) -> int:
        """``free0 * (1 - f)``, less the draft an uncounted draft worker puts into it afterwards."""
        headroom = int(self.free0_gib * (1.0 - fraction) * GIB)
        if self.draft is not None and not self.draft.is_counted:
            headroom -= self.draft_bytes(max(0, math.floor(self.raw_tokens(fraction)) + self._extra_tokens()))
        return headroom

    def usable_bytes(self, fraction: float) -> int | None:
        """Free memory a fresh server at ``fraction`` has for activations (headroom minus the fixed overhead)."""
        if self.overhead_gib is None:
            return None
        usable = int((self.free0_gib * (1.0 - fraction) - self.overhead_gib) * GIB)
        return usable - (int(self.free0_gib * (1.0 - fraction) * GIB) - self.headroom_bytes(fraction))

    def predict(self, fraction: float) -> Prediction:
        raw = math.floor(self.raw_tokens(fraction))
        tokens = raw + self._extra_tokens() if raw > 0 else raw
        is_capped = False
        if self.max_total_tokens is not None and 0 < self.max_total_tokens < tokens:
            tokens, is_capped = self.max_total_tokens, True
        page = max(1, self.page_size)
        tokens = tokens // page * page
        headroom = self.headroom_bytes(fraction)
        if tokens <= 0:
            return Prediction(fraction, 0, False, False, 0, headroom)
        return Prediction(fraction, tokens, True, is_capped, max_req_input_len(tokens, self.context_len), headroom)

    def min_viable_fraction(self) -> float:
        """The smallest fraction whose pool holds at least one page (below it sglang refuses to start)."""
        if self.max_total_tokens is not None and self.max_total_tokens < max(1, self.page_size):
            return math.inf  # the cap rounds down to zero pages: no fraction starts
        need_gib = max(1, self.page_size) * self.sizing_cell_bytes / GIB
        return 1.0 - (self.free1_gib - need_gib) / self.free0_gib

    def fraction_for_tokens(self, tokens: int) -> float | None:
        """The smallest fraction whose (uncapped) pool reaches ``tokens``; None when a cap forbids it."""
        if self.max_total_tokens is not None and self.max_total_tokens < tokens:
            return None
        rest_gib = max(0, tokens - self._extra_tokens()) * self.sizing_cell_bytes / GIB
        return 1.0 - (self.free1_gib - rest_gib) / self.free0_gib


def max_req_input_len(tokens: int, context_len: int | None) -> int:
    """sglang's longest accepted prompt: ``min(context_len - 1, max_total_num_tokens - 1) - 5``."""
    limit = tokens - 1 if context_len is None else min(context_len - 1, tokens - 1)
    return max(0, limit - 5)


@dataclass(frozen=True)
class Unmodelled:
    """Why no model could be built (missing startup numbers)."""

    reason: str


def model_from_server(
    startup: StartupNumbers | None,
    settings: ServerSettings | None = None,
    *,
    cell_bytes: float | None = None,
    anchor: bool = True,
) -> BudgetModel | Unmodelled:
    """Build the model from a server's startup lines and /server_info, anchored on its measured pool.

    ``anchor=False`` keeps the model as the logged numbers give it (to measure its error, see :func:`calibrate`).
    """
    startup = startup or StartupNumbers()
    settings = settings or ServerSettings()
    if startup.free0_gib is None or startup.free1_gib is None:
        return Unmodelled("no 'Load weight begin/end ... avail mem=' lines from the server's start")
    free0, free1 = startup.free0_gib, startup.free1_gib
    fraction = settings.mem_fraction_static
    if fraction is None:
        fraction = as_float(startup.server_args.get("mem_fraction_static"))
    tokens = settings.max_total_num_tokens or startup.max_total_num_tokens or startup.kv_tokens
    page = settings.page_size if settings.page_size > 1 else int(startup.server_args.get("page_size", 1) or 1)
    cap = settings.max_total_tokens or as_int(startup.server_args.get("max_total_tokens"))
    notes: list[str] = []
    cell = cell_bytes
    if cell is None and startup.kv_tokens and startup.kv_gib:
        cell = startup.kv_gib * GIB / startup.kv_tokens
        notes.append(f"KV cell {cell:,.0f} B/token from the KV allocation line")
    if cell is None and tokens and settings.kvcache_gib:
        cell = settings.kvcache_gib * GIB / tokens
        notes.append(f"KV cell {cell:,.0f} B/token from /server_info memory_usage")
    if cell is None and tokens and fraction is not None:
        rest = free1 - free0 * (1.0 - fraction)
        if rest > 0:
            cell = rest * GIB / tokens
            notes.append(f"KV cell {cell:,.0f} B/token from the pool size and the avail mem lines")
    if cell is None or cell <= 0:
        return Unmodelled("the KV cell size is unknown (no KV allocation line, no pool size)")
    draft = draft_share(startup, cell, settings)
    if draft is not None:
        if draft.is_counted and startup.draft_free1_gib is not None:
            free1 = startup.draft_free1_gib  # the target's pool was sized after both models' weights
        notes.append(describe_draft(draft))
    elif settings.speculative_algorithm or startup.server_args.get("speculative_algorithm"):
        notes.append("speculative decoding: no draft startup lines read; its share is only captured by the anchor")
    overhead = None
    if fraction is not None and startup.available_gpu_mem_gib is not None:
        overhead = free0 * (1.0 - fraction) - startup.available_gpu_mem_gib
        if draft is not None and not draft.is_counted and tokens:
            overhead -= (draft.weights_gib * GIB + draft.pool_bytes(tokens)) / GIB
    context_len = startup.context_len or settings.context_length
    if context_len is None and settings.max_req_input_len is not None and tokens:
        # max_req_input_len = min(context_len - 1, tokens - 1) - 5: below the pool's bound it is the context's
        if settings.max_req_input_len + 6 < tokens:
            context_len = settings.max_req_input_len + 6
    model = BudgetModel(
        free0_gib=free0,
        free1_gib=free1,
        cell_bytes=cell,
        page_size=max(1, page),
        max_total_tokens=cap if cap and cap > 0 else None,
        context_len=context_len,
        overhead_gib=overhead,
        notes=tuple(notes),
        draft=draft,
    )
    if anchor and fraction is not None and tokens:
        return anchor_model(model, fraction, tokens)
    return model


def draft_share(startup: StartupNumbers, target_cell: float, settings: ServerSettings) -> DraftShare | None:
    """The draft's share from its own startup lines (None when the log shows no draft worker)."""
    if startup.draft_weights_gib is None or not startup.draft_kv_tokens or not startup.draft_kv_gib:
        return None
    cell = startup.draft_kv_gib * GIB / startup.draft_kv_tokens
    extra = 0
    if not startup.is_draft_counted:
        steps = as_int(startup.server_args.get("speculative_num_steps")) or settings.speculative_num_steps or 0
        topk = as_int(startup.server_args.get("speculative_eagle_topk")) or settings.speculative_eagle_topk or 0
        drafts = as_int(startup.server_args.get("speculative_num_draft_tokens"))
        drafts = drafts or settings.speculative_num_draft_tokens or 0
        reqs = startup.max_running_requests or 0
        extra = reqs * (steps * topk + drafts) + 100 if reqs else 0
    return DraftShare(startup.draft_weights_gib, cell, startup.is_draft_counted, extra)


def describe_draft(draft: DraftShare) -> str:
    counted = "counted before the pool is sized" if draft.is_counted else "NOT counted: it takes the headroom"
    return (
        f"speculative decoding: draft weights {draft.weights_gib:.2f} GiB and {draft.cell_bytes:,.0f} B/token "
        f"of KV per rank, {counted}"
    )


def anchor_model(model: BudgetModel, fraction: float, tokens: int) -> BudgetModel:
    """Shift free1 so the model reproduces a measured pool exactly (unless a cap decided that pool)."""
    if model.max_total_tokens is not None and tokens >= model.max_total_tokens // model.page_size * model.page_size:
        return replace(model, notes=(*model.notes, "the measured pool is the --max-total-tokens cap: not anchored"))
    centre = tokens - model._extra_tokens() + model.page_size / 2  # floored to a page: aim at its middle
    free1 = centre * model.sizing_cell_bytes / GIB + model.free0_gib * (1.0 - fraction)
    return replace(model, free1_gib=free1, anchor=(fraction, tokens))


def offline_model(
    *,
    gpu_mem_gib: float,
    free_after_weights_gib: float,
    cell_bytes: float,
    page_size: int = 1,
    max_total_tokens: int | None = None,
    context_len: int | None = None,
) -> BudgetModel:
    """A what-if model without a host: free0 is the GPU memory sglang sees before the weights."""
    return BudgetModel(
        free0_gib=gpu_mem_gib,
        free1_gib=free_after_weights_gib,
        cell_bytes=cell_bytes,
        page_size=max(1, page_size),
        max_total_tokens=max_total_tokens,
        context_len=context_len,
        notes=("offline: numbers given on the command line",),
    )


# ------------------------------------------------------------------------------------------ calibration


@dataclass(frozen=True)
class Measured:
    """One server start of the same host and model: the fraction it ran with and the pool it reported."""

    fraction: float
    tokens: int
    source: str = ""  # e.g. "oom 2026-12-01T09:06:33Z"


@dataclass(frozen=True)
class CalibrationError:
    fraction: float
    predicted: int
    measured: int
    source: str = ""

    @property
    def relative(self) -> float:
        return (self.predicted - self.measured) / self.measured

    def __str__(self) -> str:
        return f"predicted {self.predicted:,}, measured {self.measured:,}: {self.relative * 100:+.3f}%".replace(
            "-", "\N{MINUS SIGN}"
        )


def calibrate(model: BudgetModel, measured: Sequence[Measured]) -> tuple[BudgetModel, tuple[CalibrationError, ...]]:
    """Correct the model with measured pools: one fraction anchors, several also fit the slope.

    The errors are those of the model as it was before the correction (what it would have predicted).
    """
    usable = [m for m in measured if m.tokens > 0 and not _is_capped(model, m.tokens)]
    errors = tuple(CalibrationError(m.fraction, model.predict(m.fraction).tokens, m.tokens, m.source) for m in usable)
    if not usable:
        return model, errors
    fractions = {round(m.fraction, 6) for m in usable}
    if len(fractions) == 1:
        latest = usable[-1]
        return anchor_model(model, latest.fraction, latest.tokens), errors
    # least squares on tokens + page/2 = a + b * f; b = free0 * 2^30 / cell
    xs = [m.fraction for m in usable]
    ys = [m.tokens + model.page_size / 2 for m in usable]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    if slope <= 0:
        latest = usable[-1]
        return anchor_model(model, latest.fraction, latest.tokens), errors
    intercept = mean_y - model._extra_tokens() - slope * mean_x  # tokens at f = 0: (free1 - free0) * 2^30 / cell
    sizing = model.free0_gib * GIB / slope  # the target's cell, plus a counted draft's
    cell = sizing - (model.sizing_cell_bytes - model.cell_bytes)
    if cell <= 0:
        latest = usable[-1]
        return anchor_model(model, latest.fraction, latest.tokens), errors
    free1 = intercept * sizing / GIB + model.free0_gib
    note = f"calibrated on {len(usable)} measured pools at {len(fractions)} fractions (cell {cell:,.0f} B)"
    fitted = replace(model, cell_bytes=cell, free1_gib=free1, anchor=(usable[-1].fraction, usable[-1].tokens))
    return replace(fitted, notes=(*model.notes, note)), errors


def _is_capped(model: BudgetModel, tokens: int) -> bool:
    cap = model.max_total_tokens
    return cap is not None and tokens >= cap // model.page_size * model.page_size
