#!/usr/bin/python
# Copyright: remediate maintainers
# Apache-2.0 (see the repository's pyproject.toml)
"""remediate.serving.oom: the OOM fix as one verified transaction on the target (``remediate oom --local``)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: oom
short_description: Fix an sglang or vLLM server that dies of CUDA OOM, as one verified transaction
version_added: "0.1.0"
description:
  - Runs on the GPU host itself and calls the C(remediate) library through its local transport, the same
    transaction as C(remediate oom --local).
  - Takes the unit's lock, reads the unit, plans the change (lower C(--mem-fraction-static), set
    C(--chunked-prefill-size) and C(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)), backs the file up,
    writes it atomically (compare-and-swap), runs daemon-reload, reset-failed and restart, waits for
    C(max_total_num_tokens), and rolls back automatically when the server does not come back healthy.
  - In check mode it is the dry run, C(changed) says whether the unit would change; with C(--diff) the unit's
    change is shown, secrets masked.
  - The task fails, with the tool's one-line message, when the host was rolled back or the transaction failed.
options:
  mem_fraction_static:
    description: Set C(--mem-fraction-static) to this value (0 < F < 1). Exclusive with I(mem_fraction_step).
    type: str
  mem_fraction_step:
    description: Lower the current fraction by this step, once (default 0.01 when neither is given).
    type: str
  chunked_prefill_size:
    description: C(--chunked-prefill-size) (default 4096, kept if already smaller; -1 disables chunking).
    type: int
  alloc_conf:
    description: C(PYTORCH_CUDA_ALLOC_CONF) options to ensure (default C(expandable_segments:True)).
    type: str
  min_tokens:
    description: Fail, and roll back, below this C(max_total_num_tokens).
    type: int
  target_tokens:
    description: Report the gap to this capacity (a warning, not a failure).
    type: int
  rollback:
    description: Roll back when the server does not come back healthy.
    type: bool
    default: true
  probe:
    description: Prefill this many tokens once healthy; the server crashing on it undoes the change.
    type: int
  auto:
    description: Choose fraction, chunk and alloc conf from the host's own evidence (the budget plan).
    type: bool
    default: false
  allow_raise:
    description: With I(auto), allow a fraction above the one that crashed.
    type: bool
    default: false
  force:
    description: Apply even when the latest crash contradicts the fix (see the diagnose module).
    type: bool
    default: false
  mode:
    description:
      - C(fix) applies the change; C(plan) only reports it, as check mode does, whatever check mode is.
    type: str
    choices: [fix, plan]
    default: fix
extends_documentation_fragment:
  - remediate.serving.common
  - remediate.serving.common.transaction
  - remediate.serving.common.smi
"""

EXAMPLES = r"""
- name: Remediate the OOM (a --check --diff run first shows the change)
  remediate.serving.oom:
    target_tokens: 200000
  become: true

- name: An explicit fraction and a smaller chunk, failing below 150k tokens
  remediate.serving.oom:
    unit: sglang.service
    mem_fraction_static: "0.90"
    chunked_prefill_size: 2048
    min_tokens: 150000
    wait_timeout: 600
  become: true
  register: fixed

- name: Show the capacity reached
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }}: {{ fixed.max_total_num_tokens }} tokens"
"""

RETURN = r"""
outcome:
  description: remediated, unchanged, drift (the running server restarted onto the unit), rolled_back, failed.
  returned: always
  type: str
  sample: remediated
unit:
  description: The systemd unit.
  returned: when found
  type: str
  sample: sglang.service
unit_path:
  description: The unit's file.
  returned: when found
  type: str
  sample: /etc/systemd/system/sglang.service
max_total_num_tokens:
  description: The KV pool the server reports once healthy.
  returned: when the server answered
  type: int
  sample: 207341
token_gap:
  description: Relative gap to I(target_tokens) (negative is below).
  returned: always
  type: float
backup:
  description: The backup of the unit taken before the write.
  returned: when a file was written
  type: str
  sample: /etc/systemd/system/sglang.service.bak.oom.1795939200
flags:
  description: The sglang flags before and after.
  returned: always
  type: dict
env:
  description: The allocator environment before and after.
  returned: always
  type: dict
summary:
  description: The change, one line per setting.
  returned: always
  type: list
  elements: str
unit_diff:
  description: The unit's change as a unified diff (secrets masked).
  returned: always
  type: str
phases:
  description: The transaction's timed phases.
  returned: always
  type: list
  elements: dict
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
    mem_fraction_static=dict(type="str"),
    mem_fraction_step=dict(type="str"),
    chunked_prefill_size=dict(type="int"),
    alloc_conf=dict(type="str"),
    min_tokens=dict(type="int", no_log=False),  # a token count, not a secret
    target_tokens=dict(type="int", no_log=False),
    wait_timeout=dict(type="float", default=900.0),
    lock_timeout=dict(type="int"),
    smi_timeout=dict(type="int"),
    rollback=dict(type="bool", default=True),
    probe=dict(type="int"),
    auto=dict(type="bool", default=False),
    allow_raise=dict(type="bool", default=False),
    force=dict(type="bool", default=False),
    mode=dict(type="str", choices=["fix", "plan"], default="fix"),
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        mutually_exclusive=[("mem_fraction_static", "mem_fraction_step")],
    )
    require_library(module)
    check_params(
        module,
        wait_timeout="wait_timeout",
        lock_timeout="lock_timeout",
        smi_timeout="smi_timeout",
        probe="probe",
        min_tokens="min_tokens",
        target_tokens="target_tokens",
    )
    from remediate import api

    p = module.params
    dry_run = module.check_mode or p["mode"] == "plan"

    def run() -> t.Any:  # a HostResult
        targets, factory = local()
        desired = api.desired_args(
            mem_fraction_static=p["mem_fraction_static"],
            mem_fraction_step=p["mem_fraction_step"],
            chunked_prefill_size=p["chunked_prefill_size"],
            alloc_conf=p["alloc_conf"],
        )
        request = api.OomRequest(
            targets=targets,
            unit=p["unit"],
            desired=desired,
            min_tokens=p["min_tokens"],
            target_tokens=p["target_tokens"],
            probe_tokens=p["probe"],
            timeout=p["wait_timeout"],
            dry_run=dry_run,
            rollback=p["rollback"],
            force=p["force"],
            lock_timeout=p["lock_timeout"],
            smi_timeout=p["smi_timeout"],
            auto=p["auto"],
            allow_raise=p["allow_raise"],
        )
        return one_result(api.remediate_oom(request, transport_factory=factory).results)

    result = guarded(module, run)
    if dry_run and not module.check_mode:  # mode=plan: reported as check mode would, never "changed"
        finish(module, result, read_only=True)
    finish(module, result)


if __name__ == "__main__":
    main()
