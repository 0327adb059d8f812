"""PURE: the unit-file domain — a systemd service unit as remediate reads, edits and writes it.

The model and its grammars (sections, directives, drop-ins, environment files, quoting), the server's
``ExecStart`` argv and its launchers, the ``PYTORCH_CUDA_ALLOC_CONF`` value, unit names, ports, secrets
masking and the edit plan that turns a desired state into new unit text. No I/O, no clock, no environment.
"""
