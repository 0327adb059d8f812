# Copyright: remediate maintainers
# Apache-2.0 (see the repository's pyproject.toml)
"""What the remediate.serving modules share: the library's import (``missing_required_lib`` when absent), one
HostResult → the module's result (``changed``, ``failed`` with the tool's one-line message, ``diff``), the
error boundary.

The modules run on the target and call the library installed there (``ansible_python_interpreter`` pointing at
its venv) through its local transport: the same transaction as ``remediate oom --local``. Nothing of the library
is vendored here (the collection README says why)."""

from __future__ import annotations

import traceback
import typing as t

from ansible.module_utils.basic import missing_required_lib

if t.TYPE_CHECKING:
    from ansible.module_utils.basic import AnsibleModule

    from remediate.models import HostResult

try:
    from remediate import api
    from remediate.core.bounds import check_option
    from remediate.core.unitfile.report import mask_data
    from remediate.errors import ConfigError, RemediateError

    HAS_REMEDIATE = True
    IMPORT_ERROR = None
except ImportError:
    HAS_REMEDIATE = False
    IMPORT_ERROR = traceback.format_exc()

# What changes a host: a file written (the unit, a drop-in, an EnvironmentFile) or a restart issued. `drift`
# (the unit right, the running server not) restarts; `restored` writes and restarts.
RESTARTED = frozenset({"drift", "restored", "rolled_back"})


def require_library(module: AnsibleModule) -> None:
    """Fail the task, as Ansible's own modules do, when the library is not importable by the interpreter."""
    if not HAS_REMEDIATE:
        module.fail_json(
            msg=missing_required_lib(
                "remediate",
                url="the collection README: install it into a venv from wheels (roles/install)",
            ),
            exception=IMPORT_ERROR,
        )


def check_params(module: AnsibleModule, **options: str) -> None:
    """Each option given checked as the command line and the Python API check it (the library's
    ``remediate.core.bounds``): a bad value fails the task with the CLI's one line, before anything is read.
    ``options``: the module's parameter → the library's option name (``probe="probe"``)."""
    for param, option in options.items():
        value = module.params.get(param)
        if value is None:
            continue
        try:
            check_option(option, value)
        except ConfigError as exc:
            module.fail_json(msg=str(exc))


def local() -> t.Any:
    """This machine's target and the local transport factory (``remediate … --local``)."""
    return api.local_host()


def _diff(result: HostResult) -> dict[str, str]:
    text = mask_data(result.diff) if result.diff else ""
    path = result.unit_path or result.unit or "unit"
    return {"before_header": path, "after_header": path, "prepared": text}


def finish(
    module: AnsibleModule, result: HostResult, *, read_only: bool = False, facts: dict[str, t.Any] | None = None
) -> None:
    """Exit the module with ``result`` (a HostResult): its JSON fields (secrets masked) as the module's results,
    ``changed`` exactly when a file changed or a restart was issued (in check mode: would be), ``failed`` with
    the tool's one-line message when the outcome is not a success; ``facts`` as ``ansible_facts``."""
    doc = mask_data(result.to_dict())
    doc.pop("diff", None)  # Ansible's own keys: the unit's change as --diff shows it, and changed (below)
    doc.pop("changed", None)
    doc["unit_diff"] = mask_data(result.diff)
    warnings = doc.pop("warnings", [])
    for warning in warnings:
        module.warn(warning)
    doc["remediate_warnings"] = warnings
    if read_only:
        changed = False
    elif module.check_mode:
        changed = bool(result.changed) or result.outcome == "drift"
    else:
        changed = bool(result.changed) or result.outcome in RESTARTED
    if module._diff and result.diff and not read_only:
        doc["diff"] = _diff(result)
    if facts is not None:
        doc["ansible_facts"] = facts
    if not result.ok:
        module.fail_json(msg=mask_data(result.error or result.outcome), changed=changed, **doc)
    module.exit_json(changed=changed, **doc)


def one_result(results: t.Sequence[HostResult]) -> HostResult:
    """The host's one result. A host with several sglang units (the library ran each): a task reports one unit,
    so it fails naming each unit and its outcome (give ``unit`` for one)."""
    if len(results) == 1:
        return results[0]
    each = ", ".join(f"{r.unit or '?'}: {r.outcome}" for r in results)
    raise ConfigError(f"several sglang units on this host ({each}): give unit= to report one per task")


def guarded(module: AnsibleModule, call: t.Callable[[], HostResult]) -> HostResult:
    """``call()`` with the library's errors as a failed task (one line); a bug's traceback as ``exception``."""
    try:
        return call()
    except RemediateError as exc:
        module.fail_json(msg=mask_data(str(exc)))
    except Exception as exc:  # noqa: BLE001 - the module's boundary: a bug is reported with its traceback
        module.fail_json(msg=f"internal error (a bug): {exc}", exception=traceback.format_exc())
    raise RuntimeError("fail_json returned")  # it exits the module: never reached
