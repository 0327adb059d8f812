"""The pure core, one folder per domain: unitfile/ (the unit-file model and its edit), diagnosis/ (the crash
reader), capacity/ (the KV-capacity model), engines/ (each engine's own readers), bench/ (the sweep's records);
beside them what several domains read:
probe.py (the read-only probe's output), startup.py (sglang's startup lines and /server_info), logline.py
(journal lines' prefixes), backups.py, jsondoc.py, listener.py. No I/O, no clock, no environment."""
