#!/usr/bin/python
# Copyright: remediate maintainers
# Apache-2.0 (see the repository's pyproject.toml)
"""remediate.serving.rollback: restore the unit from its backup as a verified transaction on the target."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rollback
short_description: Restore an sglang or vLLM unit from its backup, as a verified transaction
version_added: "0.1.0"
description:
  - Runs on the GPU host and calls the C(remediate) library through its local transport, the same transaction
    as C(remediate rollback --local) - the current unit saved as C(<file>.bak.rollback.<epoch>) first, an atomic
    write, daemon-reload, reset-failed, restart and the health wait.
  - In check mode it is the dry run; with C(--diff) the restore's change is shown, secrets masked.
options:
  to:
    description: The backup to restore, a path, or C(latest).
    type: str
    default: latest
extends_documentation_fragment:
  - remediate.serving.common
  - remediate.serving.common.transaction
"""

EXAMPLES = r"""
- name: Undo the last remediation
  remediate.serving.rollback:
  become: true

- name: Restore one backup
  remediate.serving.rollback:
    to: /etc/systemd/system/sglang.service.bak.oom.1795939200
  become: true
"""

RETURN = r"""
outcome:
  description: restored, unchanged, failed.
  returned: always
  type: str
  sample: restored
backup:
  description: Where the unit was saved before the restore (C(.bak.rollback.<epoch>)).
  returned: when a file was written
  type: str
max_total_num_tokens:
  description: The KV pool the restored server reports.
  returned: when the server answered
  type: int
unit_diff:
  description: The restore's change as a unified diff (secrets masked).
  returned: always
  type: str
error:
  description: The tool's one-line message when the outcome is not a success.
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
    to=dict(type="str", default="latest"),
    wait_timeout=dict(type="float", default=900.0),
    lock_timeout=dict(type="int"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    require_library(module)
    check_params(
        module,
        wait_timeout="wait_timeout",
        lock_timeout="lock_timeout",
    )
    from remediate import api

    p = module.params

    def run() -> t.Any:  # a HostResult
        targets, factory = local()
        request = api.RollbackRequest(
            targets=targets,
            unit=p["unit"],
            to=p["to"],
            timeout=p["wait_timeout"],
            lock_timeout=p["lock_timeout"],
            dry_run=module.check_mode,
        )
        rollout = api.rollback(request, transport_factory=factory)
        return one_result(rollout.results)

    finish(module, guarded(module, run))


if __name__ == "__main__":
    main()
