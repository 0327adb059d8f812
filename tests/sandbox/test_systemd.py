"""The systemd emulation (sandbox/fakesystemd, daemon-less systemctl/journalctl) against systemd's documented
semantics. Real hosts run real systemd; the emulation stays for faults real systemd cannot be made to produce."""

from __future__ import annotations

import re
import time

import pytest

pytestmark = pytest.mark.integration

WARNING = (
    "Warning: The unit file, source configuration file or drop-ins of app.service changed on disk. "
    "Run 'systemctl daemon-reload' to reload units."
)


def poll(check, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def unit(exec_start: str, extra: str = "", unit_extra: str = "") -> str:
    return f"[Unit]\nDescription=Test app\n{unit_extra}\n[Service]\nExecStart={exec_start}\n{extra}"


def main_args(host) -> list[str]:
    pid = host.show("app", "MainPID")["MainPID"]
    assert pid != "0"
    return host.run("cat", f"/proc/{pid}/cmdline").stdout.split("\0")[:-1]


def test_forgotten_daemon_reload_keeps_the_old_args(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sleep 1001"))
    assert main_args(host) == ["/bin/sleep", "1001"]
    host.write("/etc/systemd/system/app.service", unit("/bin/sleep 2002"))
    assert host.show("app", "NeedDaemonReload")["NeedDaemonReload"] == "yes"
    restart = host.systemctl("restart", "app.service")
    assert restart.returncode == 0
    assert restart.stderr.strip() == WARNING
    assert main_args(host) == ["/bin/sleep", "1001"]  # the loaded definition, not the disk
    assert WARNING in host.systemctl("status", "app").stderr
    assert host.systemctl("daemon-reload").returncode == 0
    assert host.show("app", "NeedDaemonReload")["NeedDaemonReload"] == "no"
    restart = host.systemctl("restart", "app")
    assert restart.stderr == ""
    assert main_args(host) == ["/bin/sleep", "2002"]


def test_a_new_drop_in_needs_daemon_reload_too(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sleep 1001"))
    host.write("/etc/systemd/system/app.service.d/50-fix.conf", "[Service]\nExecStart=\nExecStart=/bin/sleep 3003\n")
    assert host.show("app", "NeedDaemonReload")["NeedDaemonReload"] == "yes"
    host.systemctl("restart", "app")
    assert main_args(host) == ["/bin/sleep", "1001"]
    host.systemctl("daemon-reload")
    host.systemctl("restart", "app")
    assert main_args(host) == ["/bin/sleep", "3003"]
    props = host.show("app", "DropInPaths", "FragmentPath")
    assert props == {
        "FragmentPath": "/etc/systemd/system/app.service",
        "DropInPaths": "/etc/systemd/system/app.service.d/50-fix.conf",
    }


def test_drop_in_without_empty_execstart_is_a_bad_setting(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sleep 1001"), start=False)
    host.write("/etc/systemd/system/app.service.d/override.conf", "[Service]\nExecStart=/bin/sleep 4004\n")
    host.systemctl("daemon-reload")
    assert host.show("app", "LoadState")["LoadState"] == "bad-setting"
    result = host.systemctl("start", "app")
    assert result.returncode == 1
    assert "bad unit file setting" in result.stderr


def test_drop_ins_merge_in_name_order_with_resets(emulated_host):
    host = emulated_host
    host.write("/etc/systemd/system/app.service.d/20-b.conf", "[Service]\nEnvironment=B=2 C=from-b\n")
    host.write("/etc/systemd/system/app.service.d/10-a.conf", "[Service]\nEnvironment=\nEnvironment=A=1\n")
    host.write("/etc/systemd/system/app.service.d/30-c.conf", "[Service]\nEnvironment=C=3\n")
    host.install_unit("app.service", unit("/bin/sleep 1001", "Environment=GONE=1\n"))
    assert host.show("app", "Environment")["Environment"] == "A=1 B=2 C=3"
    cat = host.systemctl("cat", "app").stdout
    headers = re.findall(r"^# (/\S+)$", cat, flags=re.M)
    assert headers == [
        "/etc/systemd/system/app.service",
        "/etc/systemd/system/app.service.d/10-a.conf",
        "/etc/systemd/system/app.service.d/20-b.conf",
        "/etc/systemd/system/app.service.d/30-c.conf",
    ]


def test_continuations_quotes_and_variable_expansion(emulated_host):
    host = emulated_host
    host.write("/etc/default/app", "FILEVAR='from file'\nSPLIT=x y\nOVER=file\n")
    text = (
        "[Unit]\nDescription=Test app\n\n[Service]\n"
        'Environment="SPACED=a b" WORDS=w1\\sw2 OVER=env\n'
        "EnvironmentFile=/etc/default/app\n"
        "EnvironmentFile=-/etc/default/missing\n"
        "ExecStart=/usr/bin/python3 -c 'import time; time.sleep(1001)' \\\n"
        "    --one ${SPACED} \\\n"
        "# --commented-out \\\n"
        '    $SPLIT "--q=${FILEVAR}" --o=$OVER $$HOME %%\n'
    )
    host.install_unit("app.service", text)
    assert main_args(host) == [
        "/usr/bin/python3",
        "-c",
        "import time; time.sleep(1001)",
        "--one",
        "a b",
        "x",
        "y",
        "--q=from file",
        "--o=$OVER",
        "$HOME",
        "%",
    ]
    pid = host.show("app", "MainPID")["MainPID"]
    env = dict(item.split("=", 1) for item in host.run("cat", f"/proc/{pid}/environ").stdout.split("\0") if "=" in item)
    assert env["SPACED"] == "a b"
    assert env["WORDS"] == "w1 w2"
    assert env["FILEVAR"] == "from file"
    assert env["OVER"] == "file"  # EnvironmentFile= overrides Environment=
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert re.fullmatch(r"[0-9a-f]{32}", env["INVOCATION_ID"])
    props = host.show("app", "Environment", "EnvironmentFiles", "ExecStart")
    assert props["Environment"] == '"SPACED=a b" "WORDS=w1 w2" OVER=env'
    assert props["EnvironmentFiles"] == "/etc/default/app (ignore_errors=no)\n/etc/default/missing (ignore_errors=yes)"
    assert props["ExecStart"].startswith(
        "{ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -c import time; time.sleep(1001) "
        "--one a b x y --q=from file --o=$OVER $HOME % ; "
        "ignore_errors=no ; start_time=["
    )
    assert f"pid={pid} ; code=(null) ; status=0/0 }}" in props["ExecStart"]


def test_environment_file_is_read_at_exec_time(emulated_host):
    host = emulated_host
    host.write("/etc/default/app", "MODE=one\n")
    host.install_unit(
        "app.service", unit("/bin/sh -c 'echo mode=$MODE; exec sleep 1001'", "EnvironmentFile=/etc/default/app\n")
    )
    host.write("/etc/default/app", "MODE=two\n")
    host.systemctl("restart", "app")
    assert host.show("app", "NeedDaemonReload")["NeedDaemonReload"] == "no"
    poll(lambda: "mode=two" in host.journal("app"), what="mode=two")
    assert host.journal("app").count("mode=one") == 1


def test_missing_environment_file_fails_the_start(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sleep 1001", "EnvironmentFile=/etc/default/nope\n"), start=False)
    result = host.systemctl("start", "app")
    assert result.returncode == 1
    assert "unavailable resources" in result.stderr
    assert host.show("app", "ActiveState", "Result") == {"ActiveState": "failed", "Result": "resources"}


def test_crash_loop_hits_the_start_limit_and_reset_failed_clears_it(emulated_host):
    host = emulated_host
    host.install_unit(
        "app.service",
        unit(
            "/bin/sh -c 'echo boom; exit 3'",
            "Restart=on-failure\nRestartSec=10ms\n",
            "StartLimitIntervalSec=30\nStartLimitBurst=3\n",
        ),
    )
    poll(lambda: host.show("app", "Result")["Result"] == "start-limit-hit", what="start-limit-hit")
    props = host.show("app", "ActiveState", "SubState", "Result", "NRestarts", "MainPID")
    assert props == {
        "ActiveState": "failed",
        "SubState": "failed",
        "Result": "start-limit-hit",
        "NRestarts": "3",
        "MainPID": "0",
    }  # as systemd: "restart counter is at 3", then the limit
    journal = host.journal("app")
    assert journal.count("Started app.service - Test app.") == 3
    assert "app.service: Main process exited, code=exited, status=3/NOTIMPLEMENTED" in journal
    assert "app.service: Failed with result 'exit-code'." in journal
    assert journal[-5:] == [
        "app.service: Scheduled restart job, restart counter is at 3.",
        "Stopped app.service - Test app.",
        "app.service: Start request repeated too quickly.",
        "app.service: Failed with result 'start-limit-hit'.",
        "Failed to start app.service - Test app.",
    ]
    again = host.systemctl("restart", "app")
    assert again.returncode == 1
    assert "Job for app.service failed." in again.stderr
    assert host.systemctl("is-failed", "app").stdout.strip() == "failed"
    assert host.systemctl("reset-failed", "app").returncode == 0
    assert host.show("app", "ActiveState", "Result", "NRestarts") == {
        "ActiveState": "inactive",
        "Result": "success",
        "NRestarts": "0",
    }
    host.write("/etc/systemd/system/app.service", unit("/bin/sleep 1001", "Restart=on-failure\n"))
    host.systemctl("daemon-reload")
    assert host.systemctl("start", "app").returncode == 0
    assert host.systemctl("is-active", "app").stdout.strip() == "active"


def test_sigkill_is_reported_like_systemd_and_restarts(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sleep 1001", "Restart=on-failure\nRestartSec=50ms\n"))
    first = host.show("app", "MainPID", "InvocationID")
    host.run("kill", "-9", first["MainPID"])
    poll(
        lambda: host.show("app", "NRestarts")["NRestarts"] == "1" and host.show("app", "MainPID")["MainPID"] != "0",
        what="automatic restart",
    )
    second = host.show("app", "MainPID", "InvocationID", "ActiveState", "Result")
    assert second["InvocationID"] != first["InvocationID"]
    assert (second["ActiveState"], second["Result"]) == ("active", "success")
    journal = host.journal("app")
    assert journal[1:5] == [
        "app.service: Main process exited, code=killed, status=9/KILL",
        "app.service: Failed with result 'signal'.",
        "app.service: Scheduled restart job, restart counter is at 1.",
        "Stopped app.service - Test app.",
    ]


def test_stop_escalates_to_sigkill_after_timeout_stop_sec(emulated_host):
    host = emulated_host
    host.install_unit(
        "app.service",
        unit("/bin/sh -c 'trap \"\" TERM; echo ready; while :; do sleep 0.05; done'", "TimeoutStopSec=300ms\n"),
    )
    poll(lambda: "ready" in host.journal("app"), what="ready")
    started = time.monotonic()
    assert host.systemctl("stop", "app").returncode == 0
    assert 0.25 < time.monotonic() - started < 3
    assert host.show("app", "ActiveState", "Result") == {"ActiveState": "failed", "Result": "timeout"}
    journal = host.journal("app")
    assert "app.service: State 'stop-sigterm' timed out. Killing." in journal
    assert journal[-1] == "Stopped app.service - Test app."


def test_restart_is_fast_and_stop_start_states(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sleep 1001"))
    started = time.monotonic()
    assert host.systemctl("restart", "app").returncode == 0
    assert time.monotonic() - started < 0.3 + 0.1  # nsenter adds a little
    assert host.systemctl("is-active", "app").returncode == 0
    assert host.systemctl("stop", "app").returncode == 0
    inactive = host.systemctl("is-active", "app")
    assert (inactive.returncode, inactive.stdout.strip()) == (3, "inactive")
    assert host.show("app", "ActiveState", "SubState", "Result", "MainPID") == {
        "ActiveState": "inactive",
        "SubState": "dead",
        "Result": "success",
        "MainPID": "0",
    }
    assert host.journal("app")[-3:] == [
        "Stopping app.service - Test app...",
        "app.service: Deactivated successfully.",
        "Stopped app.service - Test app.",
    ]
    assert host.systemctl("reset-failed", "app").returncode == 0  # healthy unit: still 0
    assert host.systemctl("status", "nope").returncode == 4


def test_show_value_and_property_forms(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sleep 1001", "Environment=A=1\n"))
    by_p = host.systemctl("show", "app", "-p", "ActiveState,SubState").stdout
    assert by_p == "ActiveState=active\nSubState=running\n"
    # systemd prints in its own property order, whatever order they were asked for
    by_property = host.systemctl("show", "app", "--property=SubState", "--property=ActiveState", "--value").stdout
    assert by_property == "active\nrunning\n"
    assert host.systemctl("show", "app", "-P", "ActiveState").stdout == "active\n"
    assert host.systemctl("show", "-p", "NeedDaemonReload", "--value", "app.service").stdout == "no\n"
    inv = host.systemctl("show", "app", "-P", "InvocationID").stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", inv)
    missing = host.systemctl("show", "missing.service", "-p", "LoadState,ActiveState")
    assert (missing.returncode, missing.stdout) == (0, "LoadState=not-found\nActiveState=inactive\n")
    everything = host.systemctl("show", "app").stdout
    for key in (
        "FragmentPath=",
        "ExecStart={ path=/bin/sleep",
        "MainPID=",
        "NRestarts=0",
        "Result=success",
        "ExecMainStartTimestamp=",
        "InvocationID=",
    ):
        assert key in everything


def test_list_units_and_is_failed(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sleep 1001"))
    host.install_unit("idle.service", unit("/bin/true"))
    poll(lambda: host.show("idle", "ActiveState")["ActiveState"] == "inactive", what="idle exits")
    plain = host.systemctl("list-units", "--type=service", "--no-legend", "--plain").stdout.splitlines()
    assert [line.split()[:4] for line in plain] == [["app.service", "loaded", "active", "running"]]
    every = host.systemctl("list-units", "--type=service", "--all", "--no-legend", "--plain").stdout
    assert [line.split()[0] for line in every.splitlines()] == ["app.service", "idle.service"]
    assert host.systemctl("is-failed", "app").returncode == 1


def test_journalctl_lines_since_and_formats(emulated_host):
    host = emulated_host
    host.install_unit("app.service", unit("/bin/sh -c 'for i in 1 2 3 4 5; do echo line$i; done; exec sleep 1001'"))
    poll(lambda: "line5" in host.journal("app"), what="line5")
    last2 = host.run("journalctl", "-u", "app", "-n", "2", "-o", "cat", "--no-pager")
    assert last2.stdout == "line4\nline5\n"
    short = host.run("journalctl", "-u", "app.service", "-n2", "--no-pager").stdout.splitlines()
    assert re.fullmatch(rf"\w{{3}} \d\d \d\d:\d\d:\d\d {host.name} sh\[\d+\]: line5", short[-1])
    assert host.run("journalctl", "-u", "app", "--output=cat", "-n", "1").stdout == "line5\n"
    mark = time.time()
    future = host.run("journalctl", "-u", "app", "--since", f"@{mark + 5:.3f}", "-o", "cat")
    assert future.stdout == "-- No entries --\n"
    assert host.run("journalctl", "-q", "-u", "app", "--since", f"@{mark + 5:.3f}").stdout == ""
    host.systemctl("restart", "app")
    poll(lambda: host.journal("app").count("line5") == 2, what="second run")
    since = host.run("journalctl", "-b", "-u", "app", "--since", f"@{mark:.3f}", "-o", "cat").stdout.splitlines()
    assert since[0] == "Stopping app.service - Test app..."
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mark - 1))
    assert "line1" in host.run("journalctl", "-u", "app", "--since", stamp, "-o", "cat").stdout
