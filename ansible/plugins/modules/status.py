#!/usr/bin/python
# Copyright: remediate maintainers
# Apache-2.0 (see the repository's pyproject.toml)
"""remediate.serving.status: the serving unit's state as facts (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: status
short_description: Read an sglang or vLLM unit's state, settings and capacity as facts
version_added: "0.1.0"
description:
  - Read-only, on the GPU host (C(remediate status --local)); never changes anything, so C(changed) is
    always false.
  - Sets the fact C(remediate_sglang) - unit, state, flags, allocator environment, tokens and whether the
    unit is remediated - for vLLM units too (the name is the collection's first, kept for the playbooks that
    read it).
attributes:
  facts:
    support: full
    description: Sets C(ansible_facts.remediate_sglang), the unit's state.
extends_documentation_fragment:
  - remediate.serving.common
  - remediate.serving.common.read_only
"""

EXAMPLES = r"""
- name: Read the unit's state
  remediate.serving.status:
  become: true

- name: Hosts not remediated yet
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }} needs remediate.serving.oom"
  when: not ansible_facts.remediate_sglang.remediated
"""

RETURN = r"""
ansible_facts:
  description: The unit's state.
  returned: always
  type: complex
  contains:
    remediate_sglang:
      description: unit, unit_path, active_state, flags (sglang's), env (the allocator's), tokens
        (C(max_total_num_tokens)), remediated (the unit already has the fix).
      type: dict
      returned: always
outcome:
  description: unchanged (read), failed.
  returned: always
  type: str
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.remediate.serving.plugins.module_utils.remediate_module import (
    finish,
    guarded,
    local,
    one_result,
    require_library,
)

ARGUMENT_SPEC = dict(unit=dict(type="str"))


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    require_library(module)
    from remediate import api

    def run() -> t.Any:  # a HostResult
        targets, factory = local()
        request = api.StatusRequest(targets=targets, unit=module.params["unit"])
        return one_result(api.status(request, transport_factory=factory))

    result = guarded(module, run)
    status = result.status  # a StatusReport; None when the host gave no state
    facts = {
        "unit": result.unit,
        "unit_path": result.unit_path,
        "active_state": status.state.active_state if status is not None else None,
        "flags": result.flags_before,
        "env": result.env_before,
        "tokens": result.max_total_num_tokens,
        "remediated": status.remediated if status is not None else None,
    }
    finish(module, result, read_only=True, facts={"remediate_sglang": facts})


if __name__ == "__main__":
    main()
