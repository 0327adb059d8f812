"""Scripted hosts: one builder (:func:`incident_host`, the incident's sglang unit found and read by the probe)
and its named variants, each a host in a known state that a test then scripts further:

- :func:`oom_host`: the incident's unit failed after its OOM, the full Kimi argv and the OOM journal (``oom``'s
  runner: commit, wait, verify); :func:`commit_ok`, :func:`commit_error`, :func:`info` script its answers
  (:func:`commit_host`: a host that answers the commit script alone);
- :func:`remediating_host`: the same, already scripted to commit and come back healthy (a fleet's hosts);
- :func:`serving_host`: the unit active and healthy, its backups listed (``status``, ``backups``, ``rollback``);
- :func:`bench_ready_host`: the unit's server running and answering what a sweep asks (``bench``);
- :func:`waiting_host`: a restarted unit that the health wait polls, no probe (``wait_healthy`` alone);
- :func:`watched_host`: a host whose ``systemctl show`` answers the watcher's polls, nothing else;
- :func:`diagnose_host`: a failed unit whose probe answer carries a journal, nvidia-smi and the process tree;
  :func:`smi_timeout_host`: an active one whose nvidia-smi queries timed out.

:func:`run_oom` runs ``oom``'s runner on one of them, naps recorded instead of slept (tests/support/clock.py);
:class:`OneHost` is a ``transport_factory`` for the API that hands out one scripted host.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from remediate import api
from remediate.cli.render import console as render_console
from remediate.core.unitfile.edit import DesiredState, SourceFile, UnitSources, plan_edit
from remediate.fleet.inventory import HostEntry
from remediate.host.common.options import RunOptions
from remediate.host.oom.runner import remediate_host
from remediate.models import CommandResult, HostResult
from remediate.transport.base import SSHOptions
from tests.support.clock import Naps
from tests.support.fake_transport import FakeTransport, Reply, exec_start_value, probe_output, state_output

ROOT = Path(__file__).resolve().parents[2]

INCIDENT = (ROOT / "examples" / "incident" / "sglang.service").read_text()
UNIT = "sglang.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
SERVER_ARGV = ("/opt/sglang/bin/python3", "-m", "sglang.launch_server", "--host", "0.0.0.0", "--port", "30000")
PROBE = r"# remediate probe"  # templates/probe.sh.j2: run (status) or held (oom: detection, lock and read in one)
JOURNAL = r"\Ajournalctl"


def incident_host(
    name: str = "gpu-01",
    *,
    text: str | None = INCIDENT,
    unit: str = UNIT,
    path: str = UNIT_PATH,
    argv: Sequence[str] = SERVER_ARGV,
    active: str = "failed",
    files: Mapping[str, str] = {},  # noqa: B006 - read-only default
    journal: str | None = None,
    probe_tail: Sequence[str] = (),
    **properties: str | int,
) -> FakeTransport:
    """A host whose sglang unit ``unit`` is the file ``text`` at ``path`` (``None``: no file in the answer)
    running ``argv``: ``active``, or ``failed`` as the incident's OOM left it. The probe answers with the
    unit, its ``systemctl show`` properties (``properties`` override or add to them), the file and
    ``files`` (environment files, drop-ins), then ``probe_tail`` (more ``@@`` sections, before ``@@end``);
    ``journal``, when given, is what ``journalctl`` prints. The caller scripts commits, polls and HTTP."""
    running = active == "active"
    shown: dict[str, str | int] = {
        "FragmentPath": path,
        "DropInPaths": "",
        "ExecStart": exec_start_value(argv),
        "EnvironmentFiles": "",
        "NeedDaemonReload": "no",
        "ActiveState": active,
        "SubState": "running" if running else "failed",
        "Result": "success" if running else "exit-code",
        "NRestarts": 0,
        "MainPID": 4242 if running else 0,
        "InvocationID": "inv-1",
        **properties,
    }
    read = {**({} if text is None else {path: text}), **files}
    answer = probe_output(unit, shown, read, candidates=[unit])
    if probe_tail:
        answer = answer.removesuffix("@@end\n") + "\n".join(probe_tail) + "\n@@end\n"
    host = FakeTransport(name)
    host.on(PROBE, answer)
    if journal is not None:
        host.on(JOURNAL, journal)
    return host


# -- oom: the incident's unit, failed after its OOM ---------------------------------------------------------
KIMI_ARGV = [
    "/opt/sglang/bin/python3", "-m", "sglang.launch_server", "--model-path", "/models/Kimi-K2.6", "--tp", "8",
    "--host", "0.0.0.0", "--port", "30000", "--mem-fraction-static", "0.94", "--trust-remote-code",
]  # fmt: skip
NOW = 1_764_400_000.0  # 2025-11-29T07:06:40Z
EPOCH = int(NOW)
COMMIT = r"\Abash -s\n# remediate commit"
POLL = r"\Asystemctl show"
OOM_JOURNAL = "\n".join(
    [
        "Loading safetensors checkpoint shards: 100% Completed",
        "Scheduler hit an exception: Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "launched with HF_TOKEN=hf_abc123",
        "sglang.service: Main process exited, code=exited, status=1/FAILURE",
    ]
)


def oom_host(
    text: str = INCIDENT,
    *,
    active: str = "failed",
    path: str = UNIT_PATH,
    argv: list[str] | None = None,
    journal: str = OOM_JOURNAL,
) -> FakeTransport:
    """A host whose sglang unit is ``text`` at ``path``; the caller scripts commits, polls and HTTP."""
    environment = "HF_HOME=/models/.cache/huggingface CUDA_HOME=/usr/local/cuda"
    return incident_host(
        text=text, path=path, argv=argv or KIMI_ARGV, active=active, journal=journal + "\n", Environment=environment
    )


def commit_ok(path: str = UNIT_PATH, invocation: str = "inv-2", *, backup: bool = True, wrote: bool = True) -> str:
    """The commit script's answer: backed up, written, reloaded, restarted as ``invocation``."""
    lines = [f"@@backup 0 {path}.bak.oom.{EPOCH}"] if backup else []
    lines += ["@@renamed 0", "@@written 0 0123abcd"] if wrote else []
    lines += ["@@reloaded", f"@@restart {EPOCH}", f"@@restarted {invocation}", "@@end"]
    return "\n".join(lines) + "\n"


def commit_host(*answers: str | CommandResult) -> FakeTransport:
    """A host that answers only the commit script, with ``answers`` in turn (the commit step alone)."""
    return FakeTransport("gpu-01").on(r"# remediate commit", *answers)


def commit_error(code: int, message: str, stdout: str = "") -> CommandResult:
    return CommandResult(argv="bash -s", exited=code, stdout=stdout, stderr=f"@@error {message}\n")


def info(tokens: int) -> tuple[int, str]:
    """A ``/server_info`` answer with ``tokens`` of KV cache."""
    return 200, json.dumps({"max_total_num_tokens": tokens, "chunked_prefill_size": 4096})


def remediated_text(text: str = INCIDENT, path: str = UNIT_PATH, desired: DesiredState | None = None) -> str:
    """The unit as ``oom`` rewrites it (the plan's new text; ``text`` itself when nothing changes)."""
    sources = UnitSources(fragment=SourceFile(path=path, text=text), env_files={})
    plan = plan_edit(sources, desired or DesiredState(), now=datetime.fromtimestamp(NOW, tz=UTC))
    return plan.files[0].new_text if plan.files else text


def run_oom(transport: FakeTransport, *, sleep: Callable[[float], None] | None = None, **options: object) -> HostResult:
    """``oom``'s runner on one scripted host at :data:`NOW`; the health wait's naps go to ``sleep`` (default:
    dropped; pass the ``naps`` fixture to see them)."""
    return remediate_host(
        transport,
        RunOptions(**options),  # type: ignore[arg-type]
        now=lambda: NOW,
        sleep=Naps() if sleep is None else sleep,
    )


def phases(result: HostResult) -> list[str]:
    return [p.name for p in result.phases]


def written_texts(script: str) -> dict[str, str]:
    """The bytes a rendered commit script writes, per target path (decoded from its base64 array)."""
    arrays = {}
    for line in script.splitlines():
        name, eq, value = line.partition("=(")
        if eq and name in ("paths", "b64s"):
            arrays[name] = shlex.split(value.rstrip(")"))
    return {p: base64.b64decode(b).decode() for p, b in zip(arrays["paths"], arrays["b64s"], strict=True)}


def remediating_host(
    name: str, *, journal: str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB\n"
) -> FakeTransport:
    """A host running the incident's unit (failed after its OOM) that a run remediates: commit, wait, verify."""
    fake = incident_host(name, journal=journal)
    fake.on(r"# remediate commit", commit_ok())
    fake.on(POLL, state_output("activating", "start", invocation_id="inv-2", main_pid=5000))
    fake.http("/health", None, 200)
    fake.http("/server_info", (200, json.dumps({"max_total_num_tokens": 195011, "chunked_prefill_size": 4096})))
    return fake


FLEET_NAMES = ("gpu-a01", "gpu-a02", "gpu-a03")  # the unit tests' inventory (tests/unit/fleet/conftest.py)


# -- serving: the unit active and healthy ------------------------------------------------------------------
def serving_host(text: str = INCIDENT, tokens: int = 209007) -> FakeTransport:
    """The unit ``text`` active (MainPID 42), no backups listed, ``/server_info`` answering ``tokens``."""
    fake = incident_host(text=text, active="active", MainPID=42)
    fake.on(r"# remediate: list the backups", "@@end\n")
    fake.http("/server_info", (200, json.dumps({"max_total_num_tokens": tokens})))
    return fake


def bench_ready_host(
    name: str = "gpu-01",
    *,
    info: Mapping[str, object],
    active: str = "active",
    polls: Sequence[str] = (),
    journal: str | None = None,
    **properties: str | int,
) -> FakeTransport:
    """The incident's unit (no file in the answer) ``active``, its server answering ``/server_info`` with
    ``info``, ``/flush_cache`` and ``/health``; ``polls`` are the state reads (default: active, running). The
    caller scripts the requests' answers (``stream``)."""
    fake = incident_host(name, text=None, active=active, journal=journal, **properties)
    fake.on(POLL, *(polls or [state_output()]))
    fake.http("/server_info", (200, json.dumps(info)))
    fake.http("/flush_cache", (200, "Cache flushed.\n"))
    fake.http("/health", 200)
    return fake


def waiting_host(
    *health: int | None,
    info: tuple[int, str] | None = None,
    journal: Sequence[str] = ("\n",),
    polls: Sequence[str] = (),
) -> FakeTransport:
    """A unit restarted as ``inv-2``, active and running (or the state reads ``polls`` in turn); ``/health``
    answers ``health`` in turn (``None``: refused), ``/server_info`` ``info`` when given, ``journalctl`` prints
    ``journal`` in turn."""
    fake = FakeTransport("gpu-01")
    fake.on(POLL, *(polls or [state_output("active", "running", invocation_id="inv-2")]))
    fake.on(JOURNAL, *journal)
    fake.http("/health", *health)
    if info is not None:
        fake.http("/server_info", info)
    return fake


def watched_host(name: str, *show: Reply) -> FakeTransport:
    """A host as the watcher polls it: ``systemctl show`` answers ``show`` in turn (a unit's ``answer``,
    tests/support/watch_fleet.py), nothing else scripted."""
    return FakeTransport(host=name).on("systemctl show", *show)


class OneHost:
    """A ``transport_factory`` that hands out one scripted host and records what it was asked for."""

    def __init__(self, fake: FakeTransport) -> None:
        self.fake = fake
        self.seen: list[tuple[HostEntry, SSHOptions]] = []

    def __call__(self, entry: HostEntry, options: SSHOptions) -> FakeTransport:
        self.seen.append((entry, options))
        return self.fake


# -- diagnose: a failed unit and its evidence ------------------------------------------------------------
DIAGNOSIS_CASES = ROOT / "tests" / "data" / "diagnosis_cases"
SHORT_ARGV = ["/opt/sglang/bin/python3", "-m", "sglang.launch_server", "--port", "30000"]


def smi_timeout_host(text: str = INCIDENT, *, smi: str = "timeout") -> FakeTransport:
    """The unit ``text`` active (MainPID 100) whose probe answer says both nvidia-smi queries ended ``smi``
    (``timeout``: what the script reports when its bound cut them)."""
    extra = ["@@journal", "@@gpus", f"@@gpus {smi}", "@@apps", f"@@apps {smi}", "@@ps", "  100     1"]
    return incident_host(text=text, path=UNIT_PATH, argv=SHORT_ARGV, active="active", MainPID=100, probe_tail=extra)


def case_journal(case: str) -> list[str]:
    """The journal of tests/data/diagnosis_cases/``case``."""
    return (DIAGNOSIS_CASES / case / "journal.txt").read_text().splitlines()


def diagnose_host(
    journal: list[str],
    *,
    gpus: list[str] | None = None,
    apps: Sequence[str] = (),
    state: str = "failed",
    argv: list[str] = SHORT_ARGV,
    text: str = INCIDENT,
) -> FakeTransport:
    """The unit ``state`` after a crash (NRestarts 1) whose probe answer carries ``journal``, nvidia-smi's GPUs
    and compute apps (``gpus=None``: no nvidia-smi) and the process tree (server 100, its children, others)."""
    extra = ["@@journal", *journal]
    if gpus is None:
        extra.append("@@gpus absent")
    else:
        extra += ["@@gpus", *gpus, "@@apps", *apps]
    extra += ["@@ps", "  100     1", "  101   100", "  102   100", "  555     1", "  200     1", "  201   200"]
    main_pid = 100 if state == "active" else 0
    return incident_host(
        argv=argv, text=text, active=state, probe_tail=extra, Result="exit-code", NRestarts=1, MainPID=main_pid
    )


def diagnose_one(fake: FakeTransport, **kw: object) -> dict[str, object]:
    """``diagnose`` of one scripted host through the API: its result as ``--json`` prints it."""
    results = api.diagnose(api.DiagnoseRequest(targets=("gpu-01",), **kw), transport_factory=lambda entry, ssh: fake)  # type: ignore[arg-type]
    doc = json.loads(render_console.dumps(render_console.results_document(results)))
    (only,) = doc["results"]
    return only  # type: ignore[no-any-return]
