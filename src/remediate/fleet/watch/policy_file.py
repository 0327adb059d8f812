"""The watcher's policy file: YAML read here, validated by core/watch/policy.py (errors name the file and line)."""

from __future__ import annotations

from pathlib import Path

from remediate.core.watch.policy import Policy, parse_policy
from remediate.errors import ConfigError

MAX_POLICY_BYTES = 1 << 20


def load_policy(path: str | None) -> Policy:
    """The policy in ``path`` (None: the built-in defaults)."""
    if path is None:
        return Policy()
    import yaml

    try:
        raw = Path(path).read_bytes()[:MAX_POLICY_BYTES]
    except OSError as exc:
        raise ConfigError(f"cannot read the policy: {exc.strerror}", source=path) from None
    text = raw.decode("utf-8", "replace")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise ConfigError(f"{where}invalid YAML ({getattr(exc, 'problem', exc)})", source=path) from None
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            lines[str(key.value)] = key.start_mark.line + 1
            if isinstance(value, yaml.MappingNode):
                for sub, _ in value.value:
                    lines[f"{key.value}.{sub.value}"] = sub.start_mark.line + 1
    return parse_policy(data, source=path, lines=lines)
