"""What every renderer shares: the consoles, text as it may be printed, token counts, the ``--json`` document."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from remediate.core.unitfile.report import display_text, mask_data
from remediate.models import HostResult


def safe(text: str) -> str:
    """Text from hosts and units as it may be printed: secrets masked, control bytes escaped, markup escaped."""
    return escape(display_text(text))


def stdout_console() -> Console:
    """Colors only on a TTY (rich's default); logs and pipes get wide, plain tables."""
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def format_tokens(tokens: int, target: int | None) -> str:
    """``195,011 (target 200,000: −2.5%)``: the capacity against the operator's target."""
    if not target:
        return f"{tokens:,}"
    gap = (tokens - target) / target
    sign = "−" if gap < 0 else "+"
    return f"{tokens:,} (target {target:,}: {sign}{abs(gap) * 100:.1f}%)"


def results_document(results: Sequence[HostResult], **extra: Any) -> dict[str, Any]:
    """The `--json` document shared by oom, rollback and status."""
    counts = Counter(r.outcome for r in results)
    return {"results": [r.to_dict() for r in results], "summary": dict(sorted(counts.items())), **extra}


def dumps(document: dict[str, Any]) -> str:
    """A ``--json`` document as printed: secrets masked."""
    return json.dumps(mask_data(document), indent=2, sort_keys=False, ensure_ascii=False)
