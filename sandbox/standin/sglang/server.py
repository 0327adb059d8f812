"""``python -m sglang.launch_server``: the startup sequence, signals, failure modes, then HTTP."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.request

from . import __version__, args, knobs, logs, memory
from .engine import Engine
from .httpd import App, make_server

# Share of the simulated load time spent in each startup phase.
_PHASES = {"dist": 0.03, "weights": 0.82, "kv": 0.01, "graph": 0.12, "tail": 0.02}
_GRAPH_HINTS = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
_SITE = "/opt/sglang/venv/lib/python3.12/site-packages/sglang"


class _State:
    app: App | None = None
    sigterm = "exit"


def _die_initialization(exc_text: str, frames: list[tuple[str, int, str, str]]) -> None:
    """A scheduler exception during launch: log it, the main process reports and exits 1."""
    tb = ["Traceback (most recent call last):"]
    for path, lineno, func, code in frames:
        tb += [f'  File "{_SITE}/{path}", line {lineno}, in {func}', f"    {code}"]
    logs.tp0("Scheduler hit an exception: " + "\n".join(tb + [exc_text]))
    logs.main("Rank 0 scheduler is dead. Please check if there are relevant logs.")
    logs.main("Exit code: 1")
    logs.main(
        "Traceback (most recent call last):\n"
        f'  File "{_SITE}/launch_server.py", line 32, in <module>\n'
        "    run_server(server_args)\n"
        f'  File "{_SITE}/srt/entrypoints/engine.py", line 1012, in _launch_subprocesses\n'
        '    raise RuntimeError("Initialization failed. Please see the error messages above.")\n'
        "RuntimeError: Initialization failed. Please see the error messages above."
    )
    sys.stdout.flush()
    os._exit(1)


_INIT_FRAMES = [
    ("srt/managers/scheduler.py", 2901, "run_scheduler_process", "scheduler = Scheduler("),
    ("srt/managers/scheduler.py", 322, "__init__", "self.init_model_worker()"),
    ("srt/managers/tp_worker.py", 98, "__init__", "self.model_runner = ModelRunner("),
    ("srt/model_executor/model_runner.py", 330, "__init__", "self.initialize(min_per_gpu_memory)"),
]


def _on_sigterm(signum: int, frame: object) -> None:
    app = _State.app
    remaining = app.engine.running if app is not None else 0
    if app is not None:
        app.gracefully_exit = True
    logs.main(f"Gracefully exiting... remaining number of requests {remaining}")
    sys.stdout.flush()
    if _State.sigterm == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)


def _on_sigquit(signum: int, frame: object) -> None:
    logs.main(f"SIGQUIT received. signum={signum}, frame={frame}. It usually means one child failed.")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # kill_process_tree(os.getpid()) ends with itself.kill()


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
    if sa["mem_fraction_static"] is None:
        sa["mem_fraction_static"] = memory.default_mem_fraction_static(
            profile, sa["chunked_prefill_size"], sa["max_prefill_tokens"], sa["cuda_graph_max_bs"], sa["tp_size"]
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
        ns, _unknown = args.parse_args(argv, prog=prog)
    except args.ConfigError as exc:
        logs.main(f"ValueError: {exc}")
        sys.exit(1)
    if ns.model_path is None:
        args.build_parser(prog).error("the following arguments are required: --model-path")
    profile = memory.PROFILES[str(kn["profile"])]
    sa = resolve(ns, profile, kn)
    auto_off = sa.pop("_auto_chunk_off", False)
    _State.sigterm = str(kn["sigterm"])
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGQUIT, _on_sigquit)
    version_str = str(kn["api_version"])
    version = knobs.version_tuple(version_str)
    load_s = float(kn["load_s"]) * (10 if failure == "slow_load" else 1)  # type: ignore[arg-type]

    def sleep(phase: str) -> None:
        time.sleep(load_s * _PHASES[phase] * scale)

    if auto_off:
        logs.main(f"Automatically turn off --chunked-prefill-size as it is not supported for {profile.model_type}")
    logs.main("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in sa.items()) + ")")
    mfs = float(sa["mem_fraction_static"])
    logs.tp0("Init torch distributed begin.")
    sleep("dist")
    logs.tp0(f"Init torch distributed ends. mem usage={profile.gpu_total_gib - profile.free0_gib:.2f} GB")
    logs.tp0(f"Load weight begin. avail mem={profile.free0_gib:.2f} GB")
    sleep("weights")
    try:
        plan = memory.plan_memory(
            profile,
            mfs,
            tp_size=sa["tp_size"],
            page_size=sa["page_size"],
            kv_cache_dtype=sa["kv_cache_dtype"],
            max_total_tokens=sa["max_total_tokens"],
            context_length=sa["context_length"],
            max_running_requests=sa["max_running_requests"],
            cuda_graph_max_bs=sa["cuda_graph_max_bs"],
            disable_cuda_graph=sa["disable_cuda_graph"],
        )
    except memory.WeightLoadOOMError:
        weight = profile.weight_gib_at_profile_tp * profile.tp_size / sa["tp_size"]
        oom = memory.graph_capture_oom(0.0, profile)
        oom = memory.OOM(
            int(1.75 * memory.GIB), oom.total_bytes, 0, oom.total_bytes, int(profile.free0_gib * memory.GIB), 0
        )
        _die_initialization(
            "torch.OutOfMemoryError: " + memory.torch_oom_message(oom),
            _INIT_FRAMES
            + [
                (
                    "srt/model_loader/loader.py",
                    590,
                    "load_model",
                    f"model = _initialize_model(  # {weight:.1f} GiB/rank",
                )
            ],
        )
        return
    except memory.NotEnoughMemoryError as exc:
        free1 = profile.free0_gib - profile.weight_gib_at_profile_tp * profile.tp_size / sa["tp_size"]
        logs.tp0(
            f"Load weight end. type={profile.architecture}, dtype={profile.dtype}, avail mem={free1:.2f} GB, "
            f"mem usage={profile.free0_gib - free1:.2f} GB."
        )
        _die_initialization(
            f"RuntimeError: {exc}",
            _INIT_FRAMES
            + [
                ("srt/model_executor/model_runner.py", 420, "initialize", "self.init_memory_pool("),
                ("srt/model_executor/model_runner.py", 1402, "init_memory_pool", "raise RuntimeError("),
            ],
        )
        return
    except memory.GraphCaptureOOMError:
        plan = None
    free1 = profile.free0_gib - profile.weight_gib_at_profile_tp * profile.tp_size / sa["tp_size"]
    logs.tp0(
        f"Load weight end. type={profile.architecture}, dtype={profile.dtype}, avail mem={free1:.2f} GB, "
        f"mem usage={profile.free0_gib - free1:.2f} GB."
    )
    if plan is not None:
        logs.tp0(f"KV Cache is allocated. #tokens: {plan.max_total_num_tokens}, KV size: {plan.kv:.2f} GB")
        logs.tp0(f"Memory pool end. avail mem={plan.after_pool:.2f} GB")
        before_graph = plan.before_graph
    else:
        before_graph = 0.05
    sleep("kv")
    logs.tp0(f"Capture cuda graph begin. This can take up to several minutes. avail mem={before_graph:.2f} GB")
    sleep("graph")
    if plan is None or failure == "crash_during_load":
        oom = memory.graph_capture_oom(max(0.0, min(before_graph, 0.31)), profile)
        _die_initialization(
            "Exception: Capture cuda graph failed: " + memory.torch_oom_message(oom) + "\n" + _GRAPH_HINTS,
            _INIT_FRAMES
            + [
                ("srt/model_executor/model_runner.py", 452, "initialize", "self.init_device_graphs()"),
                (
                    "srt/model_executor/model_runner.py",
                    2160,
                    "init_device_graphs",
                    "self.graph_runner = CudaGraphRunner(self)",
                ),
                ("srt/model_executor/cuda_graph_runner.py", 392, "__init__", "raise Exception("),
            ],
        )
        return
    logs.tp0(
        f"Capture cuda graph end. Time elapsed: {load_s * _PHASES['graph']:.2f} s. mem usage={plan.graph:.2f} GB. "
        f"avail mem={plan.available:.2f} GB."
    )
    logs.tp0(
        f"max_total_num_tokens={plan.max_total_num_tokens}, chunked_prefill_size={sa['chunked_prefill_size']}, "
        f"max_prefill_tokens={sa['max_prefill_tokens']}, max_running_requests={plan.max_running_requests}, "
        f"context_len={plan.context_len}, available_gpu_mem={plan.available:.2f} GB"
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
        expandable=memory.has_expandable_segments(os.environ.get("PYTORCH_CUDA_ALLOC_CONF")),
        radix_cache=not sa["disable_radix_cache"],
    )
    app = App(engine, sa, version, version_str, access_log=bool(kn["access_log"]))
    _State.app = app
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
