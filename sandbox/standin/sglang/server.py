"""``python -m sglang.launch_server``: the startup sequence, signals, failure modes, then HTTP."""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from typing import NoReturn

from . import __version__, args, gpus, knobs, logs, memory, refusals, resolution, runtime, startup
from .engine import Engine
from .httpd import App, make_server


class _State:
    app: App | None = None
    board: gpus.Board | None = None
    sigterm = "version"
    version: tuple[int, ...] = (0, 5, 6)
    tick_s = 5.0 * 0.004
    scale = 0.004  # wall seconds per simulated second (knob time_scale)
    tp_size = 1


DRAIN_TICK_S = 5.0  # sigterm_watchdog's `await asyncio.sleep(5)`, simulated seconds (scaled by time_scale)


def _on_sigterm(signum: int, frame: object) -> None:
    """SignalHandler.sigterm_handler (srt/managers/tokenizer_manager.py, 0.4.10 through 0.5.23): the line and
    ``gracefully_exit``; the watchdog thread (``_sigterm_watchdog``) drains and ends the process. Before the
    server is up there is no watchdog: the stop ends at once, the same way."""
    logs.main(f"SIGTERM received. signum={signum!r} frame={frame!r}. Draining requests and shutting down...")
    app = _State.app
    if app is None:
        _end_of_stop()
    app.gracefully_exit = True


def _sigterm_watchdog(app: App) -> None:
    """TokenizerManager.sigterm_watchdog: it looks at ``gracefully_exit`` every 5 s (so a stop starts 0-5 s
    after SIGTERM), then logs the remaining requests every 5 s until none is left, then ends the process."""
    while not app.gracefully_exit or app.frozen:  # an asyncio task: nothing runs while the SIGQUIT handler holds
        time.sleep(_State.tick_s)  # the event loop (0.5.23's crash dumps): a SIGTERM then is never drained
    while True:
        remaining = list(app.rids)
        if _State.version < (0, 5, 3):  # 0.4.10.post2's wording
            logs.main(f"Gracefully exiting... remaining number of requests {len(remaining)}")
        else:  # 0.5.3 through 0.5.23
            logs.main(
                f"Gracefully exiting... Remaining number of requests {len(remaining)}. "
                f"Remaining requests remaining_rids={remaining!r}."
            )
        if not remaining:
            break
        time.sleep(_State.tick_s)
    _end_of_stop()


def _end_of_stop() -> NoReturn:
    """How the graceful stop ends. Before 0.5.23: ``kill_process_tree(os.getpid(), include_parent=True)``
    (srt/utils/common.py) kills the children, then ``itself.kill()``: the main process dies by SIGKILL, so
    systemd logs ``code=killed, status=9/KILL`` and ``Failed with result 'signal'`` for a stop it asked for.
    0.5.23: ``kill_process_tree(os.getpid(), include_parent=False, wait_timeout=60)`` (which logs its call),
    then ``sys.exit(0)``: a clean exit. The knob ``sigterm`` ("exit", "kill") overrides the version."""
    how = _State.sigterm
    if how == "version":
        how = "exit" if _State.version >= (0, 5, 23) else "kill"
    pid = os.getpid()
    if _State.version >= (0, 5, 23):
        logs.main(f"kill_process_tree called: parent_pid={pid}, include_parent={how != 'exit'}, pid={pid}")
    sys.stdout.flush()
    if _State.board is not None:
        _State.board.remove()
    if how == "kill":
        os.kill(pid, signal.SIGKILL)
    os._exit(0)


def _on_sigquit(signum: int, frame: object) -> None:
    """SignalHandler.running_phase_sigquit_handler (srt/managers/tokenizer_manager.py): its line, then (0.5.23)
    ``dump_requests_before_crash``, then ``kill_process_tree(os.getpid())``, which ends with ``itself.kill()``."""
    if _State.version < (0, 5):
        logs.main("Received sigquit from a child process. It usually means the child failed.")
    else:
        logs.main(f"SIGQUIT received. signum={signum}, frame={frame}. It usually means one child failed.")
    if _State.app is not None:  # the other ranks of the same crash, still writing while the tree is killed
        _State.app.frozen = True  # the handler blocks the event loop: the HTTP server answers nothing meanwhile
        for r, text in _State.app.engine.late_records:
            logs.rank(r, text)
    if _State.version >= (0, 5, 23):
        _dump_before_crash()
        logs.main(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}")
    sys.stdout.flush()
    if _State.board is not None:
        _State.board.remove()
    os.kill(os.getpid(), signal.SIGKILL)  # kill_process_tree(os.getpid()) ends with itself.kill()


def _env_flag(name: str, default: bool) -> bool:
    """srt/environ.py's EnvBool: "1"/"true"/"yes" (any case) is true; unset is the default."""
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in ("1", "true", "yes", "y", "on")


def _dump_before_crash() -> None:
    """TokenizerManager.dump_requests_before_crash (srt/managers/tokenizer_manager.py, 0.5.23), inside the
    SIGQUIT handler: with ``SGLANG_PYSPY_DUMP_BEFORE_CRASH`` or ``SGLANG_CUDA_COREDUMP_BEFORE_CRASH`` (both
    default true, srt/environ.py) it sleeps 5 s; then, only while scheduler processes are alive
    (``collect_scheduler_processes``, srt/utils/cudacore_pyspy_dump_utils.py: with TP > 1 the ranks that did not
    fail still are), py-spy dumps them and triggers their CUDA coredumps, then sleeps
    ``SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS`` (default 60). At TP=1 the one scheduler is gone: no wait.
    The waits are simulated seconds, scaled by ``time_scale`` (never zero)."""
    pyspy = _env_flag("SGLANG_PYSPY_DUMP_BEFORE_CRASH", True)
    coredump = _env_flag("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", True)
    if not (pyspy or coredump):
        return
    logs.main("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
    time.sleep(5.0 * _State.scale)
    pids = [os.getpid() + r for r in range(1, _State.tp_size)]  # the live ranks (the first failed, TP0's is gone)
    if not pids:
        logs.main("No live scheduler processes found; skipping py-spy and CUDA coredump.")
        return
    if pyspy:  # pyspy_dump_schedulers(scheduler_only=True): the sandbox has no py-spy, both attempts fail
        for pid in pids:
            for flag in ("--native ", ""):
                logs.main(f"Pyspy failed (py-spy dump {flag}--pid {pid}). Error: /bin/sh: 1: py-spy: not found\n")
            logs.main(f"All pyspy dump attempts failed for PID {pid}.")
    if coredump:  # trigger_cuda_user_coredump(scheduler_only=True)
        if os.environ.get("CUDA_ENABLE_USER_TRIGGERED_COREDUMP") != "1":
            logs.main(
                "CUDA user-triggered coredump is not enabled. Set "
                "CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1 before CUDA initialization."
            )
        node = os.uname().nodename
        for pid in pids:
            logs.main(
                f"CUDA coredump pipe not found for PID {pid}: corepipe.cuda.{node}.{pid}. Ensure "
                "CUDA_ENABLE_USER_TRIGGERED_COREDUMP=1 was set before this process initialized CUDA."
            )
        try:
            wait = float(os.environ.get("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "60"))
        except ValueError:
            wait = 60.0
        if wait > 0:
            logs.main(f"Waiting {wait:.1f} seconds for CUDA coredumps before exiting.")
            time.sleep(wait * _State.scale)


def resolve(ns: object, profile: memory.Profile, kn: dict) -> dict:
    """ServerArgs after __post_init__: defaults resolved the way the profile's sglang would."""
    sa = {k: v for k, v in vars(ns).items() if k != "config"}
    if sa["tokenizer_path"] is None:
        sa["tokenizer_path"] = sa["model_path"]
    if sa["served_model_name"] is None:
        sa["served_model_name"] = sa["model_path"]
    if sa["tp_size"] is None:
        sa["tp_size"] = profile.tp_size
    if sa["chunked_prefill_size"] is None:
        override = kn.get("default_chunked_prefill_size")
        sa["chunked_prefill_size"] = int(override) if override is not None else profile.default_chunked_prefill_size
        sa["_auto_chunk_off"] = sa["chunked_prefill_size"] <= 0
    if sa["cuda_graph_max_bs"] is None:
        sa["cuda_graph_max_bs"] = profile.default_cuda_graph_max_bs
    if sa["speculative_algorithm"]:  # server_args.py: EAGLE's defaults when the three are not given (steps 3, topk 1)
        sa["speculative_algorithm"] = str(sa["speculative_algorithm"]).upper()
        sa["speculative_num_steps"] = sa["speculative_num_steps"] or 3
        sa["speculative_eagle_topk"] = sa["speculative_eagle_topk"] or 1
        sa["speculative_num_draft_tokens"] = sa["speculative_num_draft_tokens"] or 4
        if sa["speculative_algorithm"] == "NEXTN" and sa["speculative_draft_model_path"] is None:
            sa["speculative_draft_model_path"] = sa["model_path"]  # NEXTN's MTP layers live in the target
    explicit = sa["mem_fraction_static"] is not None  # sglang's _raw_input: the operator gave one
    if sa["mem_fraction_static"] is None:
        sa["mem_fraction_static"] = memory.default_mem_fraction_static(
            profile, sa["chunked_prefill_size"], sa["max_prefill_tokens"], sa["cuda_graph_max_bs"], sa["tp_size"]
        )
    resolution.resolve_backend(sa, str(kn["platform"]))
    resolution.apply_aiter_factor(
        sa,
        explicit=explicit,
        context_len=int(sa["context_length"] or profile.context_len),
        version=knobs.version_tuple(str(kn["api_version"])),
        env=os.environ,
    )
    return sa


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    kn = knobs.load_knobs()
    scale = float(kn["time_scale"])  # type: ignore[arg-type]
    failure = kn["failure"]
    match = kn.get("failure_match")
    if match and str(match) not in " ".join(argv):
        failure = "none"  # e.g. only the remediated command line misbehaves, so a rollback recovers
    if failure == "exit_at_once":
        logs.main(str(kn["exit_message"]))
        sys.exit(1)
    try:
        ns, _unknown = args.parse_args(argv, prog=prog, version=knobs.version_tuple(str(kn["api_version"])))
    except args.ConfigError as exc:
        logs.main(f"ValueError: {exc}")
        sys.exit(1)
    if ns.model_path is None:
        args.build_parser(prog).error("the following arguments are required: --model-path")
    if ns.speculative_algorithm and ns.speculative_algorithm.upper() != "NEXTN" and not ns.speculative_draft_model_path:
        logs.main("ValueError: --speculative-draft-model-path is required with --speculative-algorithm")
        sys.exit(1)
    profile = memory.PROFILES[str(kn["profile"])]
    sa = resolve(ns, profile, kn)
    auto_off = sa.pop("_auto_chunk_off", False)
    _State.sigterm = str(kn["sigterm"])
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGQUIT, _on_sigquit)
    version_str = str(kn["api_version"])
    version = knobs.version_tuple(version_str)
    _State.version = version
    _State.tick_s = DRAIN_TICK_S * scale
    _State.scale = scale
    _State.tp_size = int(sa["tp_size"] or 1)
    load_s = float(kn["load_s"]) * (10 if failure == "slow_load" else 1)  # type: ignore[arg-type]
    sleep = startup.make_sleep(load_s, scale)
    nbs = gpus.neighbours(kn)
    board = gpus.Board(gpus.state_dir(kn), os.getpid(), sys.executable)
    _State.board = board
    atexit.register(board.remove)

    if auto_off:
        logs.main(f"Automatically turn off --chunked-prefill-size as it is not supported for {profile.model_type}")
    if version >= (0, 5, 23):  # entrypoints/engine.py logs _server_args_for_logging(): ServerArgs.resolved_dict()
        logs.main(f"server_args={dict(sa)!r}")
    else:  # the dataclass repr
        logs.main("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in sa.items()) + ")")
    refused = refusals.refusal(sa, version, os.environ)
    if refused is not None:
        sleep("dist")
        refusals.die_refused(*refused, int(sa["tp_size"]))
    sized_after_capture = resolution.post_capture(
        sa, platform=str(kn["platform"]), version=version, env=os.environ, draft=bool(sa["speculative_algorithm"])
    )
    plan = startup.boot(
        sa,
        profile,
        version,
        nbs,
        board,
        sleep,
        load_s,
        force_graph_failure=failure == "crash_during_load",
        post_capture=sized_after_capture,
    )
    sleep("tail")
    engine = Engine(
        plan,
        profile,
        chunked_prefill_size=int(sa["chunked_prefill_size"]),
        context_len=plan.context_len,
        time_scale=scale,
        prefill_scale=float(kn["prefill_scale"]),  # type: ignore[arg-type]
        decode_scale=float(kn["decode_scale"]),  # type: ignore[arg-type]
        expandable=runtime.has_expandable_segments(os.environ.get("PYTORCH_CUDA_ALLOC_CONF")),
        radix_cache=not sa["disable_radix_cache"],
        neighbours=nbs,
        board=board,
        kv_admission=str(kn["kv_admission"]),
        vocab_size=profile.vocab_size,
        overlap_thread=version < (0, 5, 4) and not sa["disable_overlap_schedule"],
        oom_style=str(kn["oom_style"]),
    )
    app = App(
        engine, sa, version, version_str, access_log=bool(kn["access_log"]), rust_frontend=bool(kn["rust_frontend"])
    )
    app.log_requests_level = int(sa["log_requests_level"]) if sa["log_requests"] else None
    _State.app = app
    threading.Thread(target=_sigterm_watchdog, args=(app,), name="sigterm_watchdog", daemon=True).start()
    host, port = sa["host"], int(sa["port"])
    try:
        server = make_server(app, host, port)
    except OSError as exc:
        logs.uvicorn(
            f"[Errno {exc.errno}] error while attempting to bind on address ({host!r}, {port}): "
            f"{(exc.strerror or '').lower()}",
            level="ERROR",
        )
        sys.exit(1)
    logs.uvicorn(f"Started server process [{os.getpid()}]")
    logs.uvicorn("Waiting for application startup.")
    logs.uvicorn("Application startup complete.")
    logs.uvicorn(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    threading.Thread(
        target=_warmup,
        args=(app, host, port, float(kn["warmup_s"]) * scale, failure, sa),
        daemon=True,  # type: ignore[arg-type]
    ).start()
    engine.publish()
    server.serve_forever(poll_interval=0.05)


def _warmup(app: App, host: str, port: int, seconds: float, failure: object, sa: dict) -> None:
    """sglang's _wait_and_warmup: poll model info, send one /generate, then mark the server Up."""
    start = time.monotonic()
    connect = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    base = f"http://{connect}:{port}"
    info = "/model_info" if app.version >= (0, 5, 6) else "/get_model_info"
    try:
        urllib.request.urlopen(base + info, timeout=30).read()
        if failure == "never_healthy":
            return
        if not sa.get("skip_server_warmup"):
            body = json.dumps(
                {"text": "The capital city of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
            ).encode()
            req = urllib.request.Request(base + "/generate", data=body, headers={"content-type": "application/json"})
            urllib.request.urlopen(req, timeout=600).read()
    except OSError as exc:
        logs.main(f"Initialization failed. warmup error: {exc}")
        os.kill(os.getpid(), signal.SIGKILL)
    remaining = seconds - (time.monotonic() - start)
    if remaining > 0:
        time.sleep(remaining)
    app.status = "Up"
    logs.main("The server is fired up and ready to roll!")


__all__ = ["main", "__version__"]
