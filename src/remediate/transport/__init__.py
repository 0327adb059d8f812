"""Transport layer: the only code that talks to hosts. `ssh.py` alone imports fabric/paramiko."""
