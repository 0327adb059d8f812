#!/usr/bin/python
# Copyright: remediate maintainers
# Apache-2.0 (see the repository's pyproject.toml)
"""remediate.serving.diagnose: why the server died, and the remediation to run (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: diagnose
short_description: Tell why an sglang or vLLM server died (evidence, arithmetic) and what to run
version_added: "0.1.0"
description:
  - Read-only, on the GPU host (C(remediate diagnose --local)) - the journal's crash evidence, nvidia-smi,
    the memory arithmetic, and the recommendation; C(changed) is always false.
options:
  since:
    description: Restarts to look back over (C(0) this run) or a journalctl time (C(2 hours ago)).
    type: str
  lines:
    description: Journal lines to read.
    type: int
    default: 2000
extends_documentation_fragment:
  - remediate.serving.common
  - remediate.serving.common.read_only
  - remediate.serving.common.smi
"""

EXAMPLES = r"""
- name: Why did it die
  remediate.serving.diagnose:
    since: "1"
  become: true
  register: why

- name: The recommendation
  ansible.builtin.debug:
    var: why.recommendation
"""

RETURN = r"""
findings:
  description: The evidence found (CUDA OOM lines, Xid errors, the memory lines), secrets masked.
  returned: when the unit was read
  type: list
  elements: dict
recommendation:
  description: What to do, with the C(remediate oom) command line.
  returned: when there is one
  type: dict
outcome:
  description: unchanged (read), failed.
  returned: always
  type: str
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.remediate.serving.plugins.module_utils.remediate_module import (
    check_params,
    finish,
    guarded,
    local,
    one_result,
    require_library,
)

ARGUMENT_SPEC = dict(
    unit=dict(type="str"),
    since=dict(type="str"),
    lines=dict(type="int", default=2000),
    smi_timeout=dict(type="int"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    require_library(module)
    check_params(
        module,
        lines="lines",
        smi_timeout="smi_timeout",
    )
    from remediate import api

    p = module.params

    def run() -> t.Any:  # a HostResult
        targets, factory = local()
        request = api.DiagnoseRequest(
            targets=targets, unit=p["unit"], since=p["since"], lines=p["lines"], smi_timeout=p["smi_timeout"]
        )
        return one_result(api.diagnose(request, transport_factory=factory))

    finish(module, guarded(module, run), read_only=True)


if __name__ == "__main__":
    main()
