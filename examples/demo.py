"""`make demo`: the incident, end to end, on a sandbox GPU host (systemd 252 in nspawn, real sshd).

1. A sandbox host runs the incident's unit (Kimi-K2.6, TP8, --mem-fraction-static 0.94, no chunked
   prefill, no expandable segments) under a faithful sglang stand-in (load time compressed).
2. Some traffic, then a 32k-token prefill: the server dies with torch.OutOfMemoryError; the journal
   tail shows it.
3. `remediate oom` fixes it: diff, backup, daemon-reload, reset-failed, restart, wait for
   max_total_num_tokens (195,011 against a 200,000 target: −2.5%).
4. The same 32k request now succeeds; `remediate status` shows the host remediated.

Everything it starts is stopped at the end (by PID), also on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import Sandbox, SandboxHost  # noqa: E402
from sandbox.units import free_port, incident_unit, wait_http_ok  # noqa: E402

UNIT = "sglang.service"
TIME_SCALE = float(os.environ.get("DEMO_TIME_SCALE", "0.01"))  # the ~7.5 min load takes ~4.5 s


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m" if sys.stdout.isatty() else f"\n== {text}", flush=True)


def generate(
    host: SandboxHost, port: int, prompt_tokens: int, *, max_new_tokens: int = 8, timeout: float = 120
) -> dict:
    """POST /generate with unique token ids (no prefix-cache hits), the way a load test does."""
    ids = [random.randrange(1000, 100000) for _ in range(prompt_tokens)]
    body = json.dumps(
        {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True}}
    ).encode()
    request = urllib.request.Request(
        f"http://{host.address}:{port}/generate", data=body, headers={"Content-Type": "application/json"}
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        result = json.loads(response.read())
    result["_seconds"] = time.monotonic() - started
    return result


def remediate(*args: str, sandbox: Sandbox, cwd: str) -> int:
    cmd = [sys.executable, "-m", "remediate", *args, "--ssh-config", str(sandbox.ssh_config)]
    print("$ remediate " + " ".join(args), flush=True)
    return subprocess.run(cmd, cwd=cwd, check=False).returncode


def main() -> int:
    reason = Sandbox.unavailable_reason()
    if reason:
        print(f"demo: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="remediate-demo-") as work:
        sandbox = Sandbox(Path(work) / "sandbox", 1, first_address=os.environ.get("DEMO_ADDRESS", "127.42.200.10"))
        started = time.monotonic()
        sandbox.start()
        try:
            host = sandbox.hosts[0]
            say(
                f"sandbox host {host.name} ({host.address}) is up: systemd 252 in systemd-nspawn, real sshd, "
                f"host key pinned in {sandbox.known_hosts}"
            )
            host.set_standin(time_scale=TIME_SCALE)
            # the incident's unit, bound to the host's own address and a free port (hosts share the network)
            port = free_port(host.address)
            host.install_unit(UNIT, incident_unit(host.address, port), start=True)
            print(host.read(f"/etc/systemd/system/{UNIT}"))
            say("the model loads (the port refuses connections meanwhile) …")
            if not wait_http_ok(host.address, port, deadline=120):
                raise SystemExit("demo: the sglang stand-in did not become ready")
            capacity = [line for line in host.journal(UNIT) if "max_total_num_tokens=" in line]
            print(capacity[-1] if capacity else "(no capacity line)")

            say("traffic, then a 32k-token prefill")
            for size in (1400, 11000):
                out = generate(host, port, size)
                print(f"  {size:>6}-token prompt: ok in {out['_seconds']:.2f}s")
            try:
                generate(host, port, 32768)
                print("  32768-token prompt: ok (unexpected)")
            except (urllib.error.URLError, ConnectionError, OSError) as exc:
                print(f"  32768-token prompt: connection dropped ({exc.__class__.__name__}): the server crashed")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any("OutOfMemoryError" in line for line in host.journal(UNIT)):
                time.sleep(0.1)
            say(f"journalctl -u {UNIT} (tail)")
            for line in host.journal(UNIT)[-12:]:
                print("  " + line[:240])

            say("remediate oom: back up, edit, verify, daemon-reload, reset-failed, restart, wait")
            code = remediate("oom", host.name, "--target-tokens", "200000", sandbox=sandbox, cwd=work)
            if code != 0:
                print(f"demo: remediate oom exited {code}", file=sys.stderr)
                return code

            say("the same traffic and the 32k-token prefill, after the fix")
            for size in (1400, 11000, 32768):
                out = generate(host, port, size)
                meta = out.get("meta_info", {})
                seconds, tokens = out["_seconds"], meta.get("prompt_tokens")
                print(f"  {size:>6}-token prompt: ok in {seconds:.2f}s (prompt_tokens={tokens})")

            say("a second run changes nothing (no backup, no restart)")
            remediate("oom", host.name, sandbox=sandbox, cwd=work)
            say("remediate status")
            remediate("status", host.name, sandbox=sandbox, cwd=work)
            print(f"\ndemo finished in {time.monotonic() - started:.1f}s")
            return 0
        finally:
            sandbox.stop()


if __name__ == "__main__":
    sys.exit(main())
