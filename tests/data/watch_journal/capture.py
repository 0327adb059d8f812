"""Capture the journal fixtures of tests/unit/core/watch/test_watch_trust.py from a real sandbox host (systemd 252):
``python -m tests.data.watch_journal.capture`` (root, as the sandbox needs). Each fixture is the raw
``journalctl -u sglang.service -o json`` of one scenario, plus the unit's ``systemctl show`` after it:

- ``restart.jsonl``: ``systemctl restart`` of the incident's unit, the stand-in as sglang 0.5.6 (it ends a
  graceful stop by SIGKILLing itself);
- ``stop_start.jsonl``: ``systemctl stop`` (the unit left failed, Result=signal), then ``systemctl start``;
- ``crash.jsonl``: the 32k prefill's OOM crash and its ``Restart=on-failure`` (RestartSec cut to 1 s);
- ``spoof.jsonl``: a request with ``--log-requests`` whose text quotes systemd's exit lines, and a line the
  service writes with ``SYSLOG_IDENTIFIER=systemd``, ``UNIT=``, ``MESSAGE_ID`` of a stop job, ``JOB_TYPE=stop``
  and ``_PID=1`` (journald drops the last: clients cannot set trusted fields).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from sandbox import Sandbox
from sandbox.units import free_port, incident_unit

OUT = Path(__file__).resolve().parent
UNIT = "sglang.service"
QUOTE = "sglang.service: Main process exited, code=killed, status=9/KILL ... Failed with result 'signal'."
SPOOF = (
    "MESSAGE=sglang.service: Main process exited, code=killed, status=9/KILL\\n"
    "SYSLOG_IDENTIFIER=systemd\\nUNIT=sglang.service\\n_PID=1\\nJOB_TYPE=stop\\n"
    "MESSAGE_ID=de5b426a63be47a7b6ac3eaac82e2f6f\\n"
)


def _trim(journal: str, keep: int = 30) -> str:
    """Every line of PID 1's, and the server's last ``keep`` of each invocation (its startup's hundreds of
    lines dropped to keep the fixtures small); each kept line verbatim, in the journal's order."""
    lines = journal.splitlines()
    docs = [json.loads(line) for line in lines]
    tail: dict[str, list[int]] = {}
    for i, doc in enumerate(docs):
        if doc.get("_PID") != "1":
            tail.setdefault(str(doc.get("_SYSTEMD_INVOCATION_ID")), []).append(i)
    kept = {i for rows in tail.values() for i in rows[-keep:]}
    return "".join(line + "\n" for i, line in enumerate(lines) if docs[i].get("_PID") == "1" or i in kept)


def main() -> None:
    with tempfile.TemporaryDirectory() as work, Sandbox(Path(work), 1) as fleet:
        host = fleet.hosts[0]
        host.set_standin(time_scale=0.004, decode_scale=40)
        port = free_port(host.address)

        def install(text: str) -> None:
            host.write(f"/etc/systemd/system/{UNIT}", text)
            host.systemctl("daemon-reload", check=True)
            host.systemctl("start", UNIT, check=True)
            wait_healthy()

        def wait_healthy() -> None:
            end = time.monotonic() + 60
            while time.monotonic() < end:
                probe = f"import urllib.request as u; u.urlopen('http://{host.address}:{port}/health', timeout=2)"
                if host.run("/usr/bin/python3", "-c", probe).returncode == 0:
                    return
                time.sleep(0.1)
            raise SystemExit("not healthy")

        def request(body: dict, timeout: float = 60) -> None:
            code = (
                "import json, sys, urllib.request as u; "
                f"r = u.Request('http://{host.address}:{port}/generate', data=sys.stdin.read().encode(), "
                "headers={'content-type': 'application/json'}); u.urlopen(r, timeout=600).read()"
            )
            host.run("/usr/bin/python3", "-c", code, input=json.dumps(body), timeout=timeout)

        def capture(name: str) -> None:
            time.sleep(1.0)
            journal = _trim(host.run("/usr/bin/journalctl", "-u", UNIT, "-o", "json", "--no-pager").stdout)
            show = host.run(
                "/usr/bin/systemctl", "show", UNIT, "-p", "ActiveState,SubState,Result,NRestarts,InvocationID"
            ).stdout
            (OUT / f"{name}.jsonl").write_text(journal)
            (OUT / f"{name}.show").write_text(show)
            print(name, len(journal.splitlines()), "entries;", show.replace("\n", " "), file=sys.stderr)

        base = incident_unit(host.address, port).replace("RestartSec=10", "RestartSec=1")
        for name, text in (
            ("restart", base),
            ("stop_start", base),
            ("crash", base),
            ("spoof", base.replace("--trust-remote-code", "--trust-remote-code --log-requests")),
        ):
            host.reset()
            install(text)
            if name == "restart":
                host.systemctl("restart", UNIT, check=True)
                wait_healthy()
            elif name == "stop_start":
                host.systemctl("stop", UNIT)
                capture("stopped")
                host.systemctl("start", UNIT, check=True)
                wait_healthy()
            elif name == "crash":
                for seed in (1, 2):
                    request({"input_ids": [seed + 7] * 2000, "sampling_params": {"max_new_tokens": 8}})
                request({"input_ids": [5] * 32768, "sampling_params": {"max_new_tokens": 8}})
                wait_healthy()
            else:
                request({"text": QUOTE, "sampling_params": {"max_new_tokens": 4}})
                # the service's own cgroup writes the spoof through journald's native socket, then lingers so
                # that journald reads its cgroup (the unit) from /proc
                spoof = (
                    "import socket, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
                    f"s.sendto(b'{SPOOF}', '/run/systemd/journal/socket'); time.sleep(0.5)"
                )
                host.sh(
                    "for f in /sys/fs/cgroup/unified /sys/fs/cgroup/systemd /sys/fs/cgroup; do "
                    f"p=$f/system.slice/{UNIT}/cgroup.procs; [ -e $p ] && echo $$ > $p; done; "
                    f'exec /usr/bin/python3 -c "{spoof}"',
                    check=True,
                )
            capture(name)


if __name__ == "__main__":
    main()
