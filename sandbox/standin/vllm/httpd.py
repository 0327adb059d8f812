"""The stand-in's OpenAI server: /health, /v1/models, /metrics, /v1/completions, /reset_prefix_cache.

Routes as vllm/entrypoints/openai/api_server.py has them: /health is 503 once the engine died
(EngineDeadError); /reset_prefix_cache exists only with VLLM_SERVER_DEV_MODE=1. A prefill chunk that does not fit
kills the engine: ``EngineCore encountered a fatal error.`` (vllm/v1/engine/core.py run_engine_core) and torch's
OOM text, the request answered 500, then the process exits.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vllm import memory
from vllm.knobs import load_knobs, version_tuple
from vllm.logs import LOG


def _oom_text(p: memory.Profile, tried: float, room: float) -> str:
    free_mib = max(room, 0.0) * 1024 * 0.05
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU 0 has a total "
        f"capacity of {p.total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch memory, "
        f"this process has {p.total_gib - 0.2:.2f} GiB memory in use. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-"
        "variables)"
    )


def _prefill(state: dict, prompt: int) -> str | None:
    """Run the prompt's chunks; the OOM text when one does not fit (the engine then dies)."""
    p: memory.Profile = state["profile"]
    others = sum(float(n.get("gib", 0)) for n in _neighbours(load_knobs()))
    room = memory.chunk_room_gib(p, state["sizing"], others)
    for chunk, end in memory.chunks(prompt, state["batched"]):
        need = memory.chunk_need_gib(p, chunk, end, state["expandable"])
        if need > room:
            return _oom_text(p, p.attn_gib_per_tok2 * chunk * end, room)
    return None


def _neighbours(knobs: dict) -> list[dict]:
    raw = knobs.get("neighbour")
    items = raw if isinstance(raw, list) else [raw] if raw else []
    return [n for n in items if isinstance(n, dict) and 0 in n.get("gpus", [0])]


class Handler(BaseHTTPRequestHandler):
    state: dict = {}
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # uvicorn's access line
        LOG(
            "INFO",
            "h11_impl.py:0",
            f'{self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" '
            f"{args[1] if len(args) > 1 else ''}",
        )

    def _send(self, code: int, body: object = None, ctype: str = "application/json") -> None:
        data = b"" if body is None else body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        s = self.state
        if self.path == "/health":
            self._send(503 if s["dead"] else 200)
        elif self.path == "/version":
            # vllm/entrypoints/openai/api_server.py show_version (0.8.5, 0.11.0; 0.34.0:
            # entrypoints/serve/instrumentator/basic.py): {"version": VLLM_VERSION}
            self._send(200, {"version": s["version"]})
        elif self.path == "/v1/models":
            name = str(s["opts"].get("--served-model-name") or s["opts"]["model"])
            self._send(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": name,
                            "object": "model",
                            "owned_by": "vllm",
                            "root": s["opts"]["model"],
                            "max_model_len": s["mml"],
                        }
                    ],
                },
            )
        elif self.path == "/metrics":
            # vllm/v1/metrics/loggers.py PrometheusStatLogger.log_metrics_info (0.11.0; V0's vllm/engine/metrics.py
            # in 0.8.5): vllm:cache_config_info carries CacheConfig.metrics_info(), num_gpu_blocks among the labels
            sz = s["sizing"]
            model = s["opts"]["model"]
            usage = s["used_blocks"] / sz.blocks if sz.blocks else 0.0
            text = (
                "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{engine="0",model_name="{model}"}} {float(s["running"])}\n'
                "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
                "# TYPE vllm:kv_cache_usage_perc gauge\n"
                f'vllm:kv_cache_usage_perc{{engine="0",model_name="{model}"}} {usage}\n'
                "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                "# TYPE vllm:cache_config_info gauge\n"
                f'vllm:cache_config_info{{block_size="{s["block"]}",engine="0",gpu_memory_utilization='
                f'"{s["util"]}",num_gpu_blocks="{sz.blocks}"}} 1.0\n'
            )
            self._send(200, text, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        s = self.state
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path == "/reset_prefix_cache" and os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
            self._send(200)
            return
        if self.path != "/v1/completions":
            self._send(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw or b"{}")
            prompt = body.get("prompt", "")
            ids = prompt if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt) else None
            tokens = len(ids) if ids is not None else len(str(prompt).split())
            max_tokens = int(body.get("max_tokens", 16))
        except (ValueError, TypeError, AttributeError):
            self._send(400, {"object": "error", "message": "bad request", "type": "BadRequestError", "code": 400})
            return
        if s["dead"]:
            self._send(500, {"object": "error", "message": "EngineCore encountered an issue.", "code": 500})
            return
        if s["log_requests"]:
            _log_request(s, prompt if ids is None else None, ids, max_tokens)
        if tokens + max_tokens > s["mml"]:
            msg = (
                f"This model's maximum context length is {s['mml']} tokens. However, you requested "
                f"{tokens + max_tokens} tokens ({tokens} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion."
            )
            self._send(400, {"object": "error", "message": msg, "type": "BadRequestError", "code": 400})
            return
        s["running"] += 1
        try:
            oom = _prefill(s, tokens)
            if oom is not None:
                _die(s, oom)
                self._send(
                    500,
                    {
                        "object": "error",
                        "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                        "type": "InternalServerError",
                        "code": 500,
                    },
                )
                return
            time.sleep(tokens / 10000 * float(s["knobs"]["time_scale"]))
        finally:
            s["running"] -= 1
        usage = {"prompt_tokens": tokens, "completion_tokens": max_tokens, "total_tokens": tokens + max_tokens}
        model = s["opts"]["model"]
        if body.get("stream"):
            stream_options = body.get("stream_options") or {}
            self._stream(
                model,
                max_tokens,
                usage if stream_options.get("include_usage") else None,
                bool(stream_options.get("include_usage") and stream_options.get("continuous_usage_stats")),
                tokens,
            )
            return
        choice = {"index": 0, "text": " ok" * max_tokens, "logprobs": None, "finish_reason": "length"}
        self._send(
            200,
            {
                "id": "cmpl-standin",
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
                "usage": usage,
            },
        )

    def _stream(self, model: str, max_tokens: int, usage: dict | None, continuous: bool, prompt: int) -> None:
        """Server-sent events as vLLM's OpenAIServingCompletion streams them: one chunk a token (with the usage so
        far when ``stream_options.continuous_usage_stats`` is set too), the usage chunk
        (``stream_options.include_usage``) with empty choices, then ``data: [DONE]``. Each token after the first
        takes a decode step that grows with the context (10 ms at none, twice that at 16k, simulated)."""
        step = 0.01 * (1 + prompt / 16384) * float(self.state["knobs"]["time_scale"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Connection", "close")
        self.end_headers()
        head = {"id": "cmpl-standin", "object": "text_completion", "created": int(time.time()), "model": model}
        for n in range(max_tokens):
            if n:
                time.sleep(step)
            done = "length" if n == max_tokens - 1 else None
            choice = {"index": 0, "text": " ok", "logprobs": None, "finish_reason": done}
            chunk = {**head, "choices": [choice]}
            if continuous and usage is not None:
                prompt = usage["prompt_tokens"]
                chunk["usage"] = {"prompt_tokens": prompt, "completion_tokens": n + 1, "total_tokens": prompt + n + 1}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        if usage is not None:
            self.wfile.write(f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


def _log_request(state: dict, prompt: str | None, ids: list[int] | None, max_tokens: int) -> None:
    """The request's prompt in the server's log, as RequestLogger.log_inputs writes it
    (vllm/entrypoints/logger.py; called by OpenAIServing._log_inputs, entrypoints/openai/serving_engine.py,
    for each prompt ``{request_id}-{i}`` of OpenAIServingCompletion.create_completion): the prompt's repr,
    whatever it holds — systemd's words too, on a line of the server's own (uvicorn's stderr)."""
    state["requests"] += 1
    request_id = f"cmpl-{os.getpid():x}{state['requests']:08x}-0"
    where = "logger.py:40" if version_tuple(state["version"]) >= (0, 11) else "logger.py:39"
    params = f"SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens={max_tokens})"
    tail = (
        "prompt_embeds shape: None, lora_request: None."
        if where == "logger.py:40"
        else ("lora_request: None, prompt_adapter_request: None.")
    )
    LOG(
        "INFO",
        where,
        f"Received request {request_id}: prompt: {prompt!r}, params: {params}, prompt_token_ids: {ids}, {tail}",
    )


def _die(state: dict, oom: str) -> None:
    state["dead"] = True
    LOG("ERROR", "core.py:710", "EngineCore encountered a fatal error.", engine=True)
    LOG.traceback(oom)
    LOG("ERROR", "async_llm.py:480", "AsyncLLM output_handler failed.")
    delay = float(state["knobs"].get("exit_after_death_s", 0.5))
    threading.Timer(delay, lambda: os._exit(1)).start()


def serve_http(state: dict, host: str, port: int) -> int:
    """Serve until SIGTERM/SIGINT, then stop as vLLM does: entrypoints/launcher.py serve_http's
    signal_handler cancels the server task (not uvicorn's own handler) and logs ``Shutting down FastAPI HTTP
    server.``; entrypoints/openai/api_server.py run_server_worker awaits uvicorn's Server.shutdown only after
    the engine client's context exited (build_async_engine_client_from_engine_args: AsyncLLM.shutdown ends
    the engine core), so uvicorn's ``Shutting down`` / ``Waiting for application shutdown.`` / ``Application
    shutdown complete.`` come last, and the process returns from main: exit 0 (0.8.5 and 0.11.0 alike)."""
    Handler.state = state
    httpd = ThreadingHTTPServer((host, port), Handler)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=httpd.shutdown, daemon=True).start()  # serve_forever runs on this thread

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    LOG("INFO", "api_server.py:1912", f"Starting vLLM API server 0 on http://{host}:{port}")
    LOG("INFO", "on.py:62", "Application startup complete.")
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
    if stopping.is_set():
        scale = float(state["knobs"]["time_scale"])
        where = "launcher.py:99" if version_tuple(state["version"]) >= (0, 11) else "launcher.py:79"
        LOG("INFO", where, "Shutting down FastAPI HTTP server.")
        time.sleep(2.0 * scale)  # the engine core's shutdown (its process joined), a couple of seconds
        for line in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete."):
            _uvicorn(line)
    return 0


def _uvicorn(message: str) -> None:
    """uvicorn's own logger (uvicorn/logging.py DefaultFormatter: ``INFO:     message``), on stderr."""
    with LOG.lock:
        sys.stderr.write(f"INFO:     {message}\n")
        sys.stderr.flush()
