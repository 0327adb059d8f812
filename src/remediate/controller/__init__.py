"""The controller's own files: everything remediate writes on the machine it runs on.

::

    state.py          the state directory, resolved there only (state_dir); its files' safe reads and appends
    transactions.py   transactions.jsonl: one line per transaction event
    retry.py          retry/remediate-retry-<UTC>.yaml (or --retry-file): where and how it is written
    observations.py   observations.jsonl: the calibration log `plan` and `oom --auto` read
    internal_errors.py internal-errors.log: the tracebacks of bugs a rollout caught
    localfile.py      `edit --write`'s local unit file (backup, compare-and-swap, atomic replace)

Same floor as transport/: it may import core/, errors and models (and the stdlib's I/O), never a host or
the fleet; host/, fleet/ and the faces import it.
"""
