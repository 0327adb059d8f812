"""Fault-matrix cells (issue 20): root never writes, reads or restores through a name the service account
controls. Real sandbox hosts; the service account is uid 1001, and its attack is a real process in the host.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.node import Node

pytestmark = pytest.mark.e2e

SERVICE_UID = 1001
OWNED_DIR = "/srv/sglang"  # the service account's directory (often /opt/sglang): it can rename any name in it
OWNED_ENV = f"{OWNED_DIR}/sglang.env"
ROOT_ENV = "/etc/default/sglang"
ATTACKER = "remediate-test-attacker.service"
# Swap every name remediate could use in the directory (its temp files, the file, its backups) for a
# symlink to /etc/passwd, as fast as a shell can: what winning the race after mktemp takes.
_SWAP_LOOP = (
    f"shopt -s nullglob; cd {OWNED_DIR} && while :; do for f in .remediate* sglang.env.bak.*; do "
    '[ -L "$f" ] || ln -sfn /etc/passwd "$f" 2>/dev/null; done; done'
)


def env_unit(node: Node, env_file: str) -> tuple[str, str]:
    """A unit whose fraction lives in ``env_file`` (written, root's, 0600); (unit text, env text)."""
    env_text = (
        'SGLANG_ARGS="--model-path /models/Kimi-K2.6 --tp 8 --trust-remote-code '
        f'--host {node.host.address} --port {node.port} --mem-fraction-static 0.94"\n'
    )
    unit = (
        "[Unit]\nDescription=SGLang server\n\n[Service]\n"
        f"EnvironmentFile={env_file}\n"
        "ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server $SGLANG_ARGS\n"
        "Restart=on-failure\n"
    )
    node.host.write(env_file, env_text, mode=0o600)
    node.install(unit)
    return unit, env_text


@pytest.fixture
def attacker(node: Node) -> Iterator[Node]:
    """/srv/sglang owned by the service account (0755) and its swap loop running in the host as that uid."""
    node.host.run("/bin/mkdir", "-p", "-m", "0755", OWNED_DIR, check=True)
    node.host.run("/bin/chown", f"{SERVICE_UID}:{SERVICE_UID}", OWNED_DIR, check=True)
    try:
        yield node
    finally:
        node.host.systemctl("kill", "--signal=SIGKILL", ATTACKER)
        node.host.systemctl("stop", ATTACKER)


def test_symlink_swap_in_a_service_writable_directory_is_refused(attacker: Node) -> None:
    node = attacker
    unit, env_text = env_unit(node, OWNED_ENV)
    passwd = node.bytes("/etc/passwd")
    started = node.host.run(  # a transient unit, so that the host's reset stops it too
        "systemd-run", f"--unit={ATTACKER}", "/usr/bin/setpriv", f"--reuid={SERVICE_UID}", f"--regid={SERVICE_UID}",
        "--clear-groups", "/bin/bash", "-c", _SWAP_LOOP,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    state = node.show("ActiveState", unit=ATTACKER)["ActiveState"]
    assert state == "active", node.host.journal(ATTACKER)

    run = node.cli("oom", "--wait-timeout", "60")

    assert node.bytes("/etc/passwd") == passwd, f"root wrote through a swapped name: {run}"
    assert node.host.path("/etc/passwd").stat().st_uid == 0
    assert run.returncode == 2, run
    error = run.result["error"]
    assert f"{OWNED_DIR} is owned by uid {SERVICE_UID}, not root" in error, error
    assert f"chown root:root {OWNED_DIR} && chmod go-w {OWNED_DIR}, or move the file to a root-owned directory" in error
    assert "\n" not in error
    assert node.bytes("/etc/passwd") == passwd
    assert node.host.read(OWNED_ENV) == env_text and node.host.read("/etc/systemd/system/sglang.service") == unit
    assert not [n for n in node.ls(OWNED_DIR) if n != "sglang.env"], "no backup and no temp file was made there"
    assert not [line for line in node.audit() if line.split(" ", 1)[0] in ("daemon-reload", "restart")]
    assert "commit" not in [p["name"] for p in run.result.get("phases", [])], "refused at plan time, by the read"

    planned = node.cli("oom", "--dry-run")  # the locked read's check: a dry run says so too
    assert planned.returncode == 2 and f"{OWNED_DIR} is owned by uid {SERVICE_UID}" in planned.result["error"]


def test_a_planted_symlink_backup_is_flagged_ignored_by_latest_and_refused_by_path(node: Node) -> None:
    _, env_text = env_unit(node, ROOT_ENV)
    run = node.cli("oom", "--wait-timeout", "60")
    assert run.returncode == 0 and run.result["outcome"] == "remediated", run
    [real_backup] = node.backups(ROOT_ENV)
    assert node.host.read(real_backup) == env_text
    shadow = node.bytes("/etc/shadow")
    planted = f"{ROOT_ENV}.bak.oom.9999999999"  # newer than anything real: what `latest` would pick
    node.host.run("/bin/ln", "-s", "/etc/shadow", planted, check=True)

    listed = node.cli("backups")
    assert listed.returncode == 0, listed
    rows = {row["path"]: row for row in listed.result["backups"]}
    assert rows[planted]["unsafe"] == "a symlink" and rows[planted]["sha256"] == ""
    assert rows[real_backup]["unsafe"] is None
    assert "root:" not in listed.stdout, "the link's target is never read"
    shown = node.cli("backups", json_out=False)
    assert f"{planted}" in shown.stdout and "NOT RESTORABLE: a symlink, never read" in shown.stdout

    refused = node.cli("rollback", "--to", planted)
    assert refused.returncode == 2, refused
    assert f"{planted} is a symlink: not a backup remediate wrote, refusing it" in refused.result["error"]

    restored = node.cli("rollback", "--wait-timeout", "60")
    assert restored.returncode == 0 and restored.result["outcome"] == "restored", restored
    assert node.host.read(ROOT_ENV) == env_text
    assert node.bytes("/etc/shadow") == shadow and b"root:" not in node.bytes(ROOT_ENV)
    assert node.host.path(planted).is_symlink()


def test_a_fifo_planted_under_a_backup_name_is_rejected_unopened_and_refused_by_path(attacker: Node) -> None:
    """The service account plants a FIFO under a backup's name in its directory: a plain open would block
    until the listing's deadline (the old listing skipped it unlisted). It is listed as not restorable, its
    bytes never read, and `rollback --to` it is refused."""
    node = attacker
    unit, env_text = env_unit(node, OWNED_ENV)
    planted = f"{OWNED_ENV}.bak.oom.9999999999"
    made = node.host.run(
        "/usr/bin/setpriv", f"--reuid={SERVICE_UID}", f"--regid={SERVICE_UID}", "--clear-groups",
        "/usr/bin/mkfifo", planted,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr

    listed = node.cli("backups")
    assert listed.returncode == 0, listed
    rows = {row["path"]: row for row in listed.result["backups"]}
    assert rows[planted]["unsafe"] == "not a regular file (a FIFO, a device, a directory)", rows
    assert rows[planted]["sha256"] == "" and rows[planted]["changes"] == []

    refused = node.cli("rollback", "--to", planted)
    assert refused.returncode == 2, refused
    assert f"{planted} is not a regular file (a FIFO, a device, a directory)" in refused.result["error"]
    assert node.host.path(planted).is_fifo()
    assert node.host.read(OWNED_ENV) == env_text and node.host.read("/etc/systemd/system/sglang.service") == unit
