"""Transport layer: the only code that talks to hosts. `ssh.py` (fabric and paramiko), `ssh_errors.py` and
`ssh_security.py` (paramiko) are the only importers of those libraries; `tests/unit/test_layers.py` holds that."""
