"""jinja2 environment for the packaged templates (remote shell transactions and reports).

Every value that reaches a shell goes through the ``q`` filter (``shlex.quote``); StrictUndefined
makes a missing variable an error instead of an empty string in a root shell script.
"""

from __future__ import annotations

import shlex
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from remediate.errors import ConfigError


def _template_dir() -> Path:
    packaged = resources.files("remediate") / "templates"
    if packaged.is_dir():
        return Path(str(packaged))
    # A development checkout: templates/ sits at the repository root.
    return Path(__file__).resolve().parents[4] / "templates"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_template_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    return env


def render(name: str, **context: Any) -> str:
    """Render ``templates/<name>``."""
    try:
        return environment().get_template(name).render(**context)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"template {name}: {exc}") from exc
