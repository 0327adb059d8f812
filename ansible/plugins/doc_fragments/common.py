# Copyright: remediate maintainers
# Apache-2.0 (see the repository's pyproject.toml)
"""What the remediate.serving modules document alike: the unit, the requirements, the timeouts, the attributes
(``extends_documentation_fragment: remediate.serving.common[.<part>]``). ansible-core merges fragments into
DOCUMENTATION only; each module's RETURN stays its own (ansible-doc has no fragments for return values)."""

from __future__ import annotations


class ModuleDocFragment:
    # Every module: the unit (found by its ExecStart when not given), what the host needs, who wrote it.
    DOCUMENTATION = r"""
options:
  unit:
    description:
      - The systemd unit. Default, the one unit whose ExecStart runs sglang or vLLM (a glob is taken as the
        CLI's C(--unit) takes it).
    type: str
requirements:
  - the C(remediate) library importable by C(ansible_python_interpreter) (see the C(install) role)
  - root on the target (C(become=true))
notes:
  - Runs on the GPU host itself and calls the C(remediate) library through its local transport, the code path
    of C(remediate ... --local); sglang and vLLM units alike.
author:
  - remediate maintainers (!UNKNOWN)
"""

    # The two modules that change a host (oom, rollback): one transaction each, with a health wait.
    TRANSACTION = r"""
options:
  wait_timeout:
    description: Seconds to wait for the server to come back.
    type: float
    default: 900
  lock_timeout:
    description: Seconds to wait for another run's lock on the unit (default 30).
    type: int
attributes:
  check_mode:
    support: full
    description: The dry run; C(changed) says whether the unit would change.
  diff_mode:
    support: full
    description: The unit's change as a unified diff, secrets masked.
"""

    # The two modules that only read (status, diagnose).
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: Read-only; check mode runs it as is and reports the same.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
"""

    # The modules that query the GPUs (oom, diagnose).
    SMI = r"""
options:
  smi_timeout:
    description: Seconds each nvidia-smi query may take (default 10).
    type: int
"""
