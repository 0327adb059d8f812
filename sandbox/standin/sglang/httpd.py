"""The HTTP front end (uvicorn/FastAPI look-alike) on http.server.ThreadingHTTPServer."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from . import logs
from .engine import Chunk, Engine, GenerateError, text_to_ids

FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)


class App:
    """What the handlers need: status, engine, the info dicts, the version switch."""

    def __init__(
        self,
        engine: Engine,
        server_args: dict,
        version: tuple[int, ...],
        version_str: str,
        *,
        access_log: bool = True,
        rust_frontend: bool = False,
    ) -> None:
        self.engine = engine
        self.server_args = server_args
        self.version = version
        self.version_str = version_str
        self.access_log = access_log
        self.rust_frontend = rust_frontend
        self.status = "Starting"  # ServerStatus: Starting -> Up
        self.gracefully_exit = False
        self.rids: list[str] = []  # TokenizerManager.rid_to_state: the requests a graceful stop drains
        self.log_requests_level: int | None = None  # --log-requests: its level, else None
        self.frozen = False  # the SIGQUIT handler holds the event loop (0.5.23's crash dumps): nothing answers

    # JSON documents -------------------------------------------------------------------------------
    def server_info(self) -> dict:
        plan = self.engine.plan
        internal = dict(self.server_args)
        internal.update(
            {
                "last_gen_throughput": self.engine.last_gen_throughput,
                "memory_usage": {
                    "weight": round(plan.weight, 2),
                    "kvcache": round(plan.kv, 2),
                    "token_capacity": int(plan.max_total_num_tokens),
                    "graph": round(plan.graph, 2),
                },
                "load": self.engine.running,
            }
        )
        return {
            **self.server_args,
            "status": "ready",
            "max_total_num_tokens": plan.max_total_num_tokens,
            "max_req_input_len": plan.max_req_input_len,
            "internal_states": [internal],
            "version": self.version_str,
        }

    def model_info(self) -> dict:
        info = {
            "model_path": self.server_args["model_path"],
            "tokenizer_path": self.server_args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
        }
        if self.version >= (0, 5, 6):
            info.update(
                {"weight_version": "default", "has_image_understanding": True, "has_audio_understanding": False}
            )
        sa, profile = self.server_args, self.engine.profile
        if self.version >= (0, 5, 23):
            info.update(
                {
                    "served_model_name": sa["served_model_name"],
                    "load_format": sa["load_format"],
                    "reasoning_parser": sa["reasoning_parser"],
                    "tool_call_parser": sa["tool_call_parser"],
                    "disaggregation_mode": "null",
                    "model_type": profile.model_type,
                    "architectures": [profile.architecture],
                }
            )
        if self.rust_frontend:  # sglang's Rust HTTP frontend also reports the tokenizer's limits
            info.update(
                {
                    "model_type": profile.model_type,
                    "architectures": [profile.architecture],
                    "max_context_length": self.engine.context_len,
                    "vocab_size": self.engine.vocab_size,
                    "eos_token_ids": [163586],
                    "pad_token_id": 163839,
                    "bos_token_id": 163584,
                    "max_req_input_len": self.engine.plan.max_req_input_len,
                }
            )
        return info


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    app: App  # set on the subclass by make_server

    # logging ----------------------------------------------------------------------------------------
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if not self.app.access_log:
            return
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        logs.access(f'{host}:{port} - "{self.command} {self.path} {self.request_version}" {code} {phrase}')

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        pass

    # responses --------------------------------------------------------------------------------------
    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj: object) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def _empty(self, code: int) -> None:
        self._send(code, b"", "text/plain; charset=utf-8")

    def _body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    # routing ----------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._route("PUT")

    def _route(self, method: str) -> None:
        path = urlsplit(self.path).path
        app = self.app
        while app.frozen:  # uvicorn's event loop is blocked in the signal handler: no answer, until the kill
            time.sleep(0.05)
        new = app.version >= (0, 5, 6)
        routes: dict[str, tuple[tuple[str, ...], object]] = {
            "/health": (("GET",), self._health),
            "/health_generate": (("GET",), self._health),
            "/get_model_info": (("GET",), self._model_info),
            "/get_server_info": (("GET",), self._server_info),
            "/flush_cache": (("GET", "POST"), self._flush_cache),
            "/generate": (("POST", "PUT"), self._generate),
            "/get_load": (("GET",), self._get_load),
        }
        if new:
            routes["/model_info"] = (("GET",), self._model_info)
            routes["/server_info"] = (("GET",), self._server_info)
        if app.version >= (0, 5, 20):
            routes["/ready"] = (("GET",), self._ready)
        if path not in routes:
            self._body()
            self._json(404, {"detail": "Not Found"})
            return
        methods, handler = routes[path]
        if method not in methods:
            self._body()
            self._json(405, {"detail": "Method Not Allowed"})
            return
        try:
            handler(path)  # type: ignore[operator]
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # endpoints --------------------------------------------------------------------------------------
    def _health(self, path: str) -> None:
        app = self.app
        if app.gracefully_exit:
            logs.main("Health check request received during shutdown. Returning 503.")
            self._empty(503)
            return
        if app.status != "Up":
            self._empty(503)
            return
        if (
            app.version >= (0, 5, 6)
            and path == "/health"
            and os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() in ("0", "false")
        ):
            self._empty(200)
            return
        for _ in app.engine.generate([0], 1):
            pass
        self._empty(200)

    def _ready(self, path: str) -> None:
        self._empty(200 if self.app.status == "Up" else 503)

    def _deprecated(self, path: str, new: str) -> None:
        if self.app.version >= (0, 5, 6):
            logs.main(
                f"Endpoint '{path}' is deprecated and will be removed in a future version. Please use '{new}' instead."
            )

    def _model_info(self, path: str) -> None:
        if path == "/get_model_info":
            self._deprecated(path, "/model_info")
        self._json(200, self.app.model_info())

    def _server_info(self, path: str) -> None:
        if path == "/get_server_info":
            self._deprecated(path, "/server_info")
        self._json(200, self.app.server_info())

    def _get_load(self, path: str) -> None:
        eng = self.app.engine
        self._json(200, [{"dp_rank": 0, "num_reqs": eng.running, "num_waiting_reqs": 0, "num_tokens": eng.used_tokens}])

    def _flush_cache(self, path: str) -> None:
        self._body()
        ok = self.app.engine.flush_cache()
        self._send(200 if ok else 400, FLUSH_TEXT.encode(), "text/plain; charset=utf-8")

    def _generate(self, path: str) -> None:
        created = time.monotonic()
        try:
            req = json.loads(self._body() or b"{}")
            if not isinstance(req, dict):
                raise GenerateError("The request body must be a JSON object.")
            ids, params, stream, rid = _parse_generate(req)
            self.app.engine.validate(ids, params["max_new_tokens"])
            max_new = self.app.engine.max_new_tokens_for(len(ids), params["max_new_tokens"])
        except (GenerateError, json.JSONDecodeError, TypeError, ValueError) as exc:
            logs.main(f"[http_server] Error: {exc}")
            self._json(400, {"error": {"message": str(exc)}})
            return
        if self.app.log_requests_level is not None:
            logs.main(f"Receive: obj={received_repr(req, ids, params, stream, rid, self.app.log_requests_level)}")
        self.app.rids.append(rid)
        try:
            self._generated(ids, max_new, stream, rid, created)
        finally:
            self.app.rids.remove(rid)

    def _generated(self, ids: list[int], max_new: int, stream: bool, rid: str, created: float) -> None:
        gen = self.app.engine.generate(ids, max_new)
        if not stream:
            out: dict = {}
            out_ids: list[int] = []
            for cached, chunk in gen:
                out_ids.extend(chunk.new_ids)
                out = _out(rid, len(ids), cached, chunk, max_new, created, final=chunk.finished)
            out["output_ids"] = out_ids
            self._json(200, out)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            for cached, chunk in gen:
                out = _out(rid, len(ids), cached, chunk, max_new, created, final=chunk.finished)
                self._chunk(b"data: " + json.dumps(out).encode() + b"\n\n")
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            gen.close()
            logs.main(f"[http_server] Client disconnected: rid={rid}")
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# --log-requests (TokenizerManager._handle_generate_request in 0.5.x, RequestLogger.log_received_request in
# srt/utils/request_logger.py in 0.5.23: both `Receive: obj={dataclass_to_string_truncated(obj, max_length,
# skip_names)}`); max_length and skip_names by --log-requests-level (get_log_request_metadata,
# srt/managers/tokenizer_communicator_mixin.py): 0 and 1 skip the inputs (0 the sampling params too), 2 cuts a
# value longer than 2048 to its two halves, 3 keeps everything. The stand-in renders the GenerateReqInput
# fields it simulates (io_struct.py), in the dataclass's order.
_LEVEL_SKIPS = {0: {"text", "input_ids", "sampling_params"}, 1: {"text", "input_ids"}}


def _truncated(value: object, max_length: int) -> str:
    """sglang's ``dataclass_to_string_truncated`` for one field (srt/utils/common.py)."""
    half = max_length // 2
    if isinstance(value, str):
        return f"{value[:half]!r} ... {value[-half:]!r}" if len(value) > max_length else repr(value)
    if isinstance(value, list):
        return f"{value[:half]} ... {value[-half:]}" if len(value) > max_length else str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"'{k}': {_truncated(v, max_length)}" for k, v in value.items()) + "}"
    return str(value)


def received_repr(req: dict, ids: list[int], params: dict, stream: bool, rid: str, level: int) -> str:
    """``GenerateReqInput(text=…, input_ids=…, …)`` as the request log prints it at ``level``."""
    max_length = 2048 if level == 2 else 1 << 30
    fields = {
        "text": req.get("text"),
        "input_ids": req.get("input_ids"),
        "input_embeds": None,
        "image_data": None,
        "video_data": None,
        "audio_data": None,
        "sampling_params": req.get("sampling_params", params),
        "rid": rid,
        "return_logprob": req.get("return_logprob"),
        "stream": stream,
    }
    skip = _LEVEL_SKIPS.get(level, set())
    return (
        "GenerateReqInput("
        + ", ".join(f"{k}={_truncated(v, max_length)}" for k, v in fields.items() if k not in skip)
        + ")"
    )


def _parse_generate(req: dict) -> tuple[list[int], dict, bool, str]:
    if req.get("input_ids") is not None:
        ids = req["input_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise GenerateError("input_ids must be a list of token ids (batched requests are not simulated)")
    elif req.get("text") is not None:
        if not isinstance(req["text"], str):
            raise GenerateError("text must be a string (batched requests are not simulated)")
        ids = text_to_ids(req["text"])
    else:
        raise GenerateError("Either text, input_ids or input_embeds should be provided.")
    if not ids:
        raise GenerateError("The input_ids is empty.")
    params = dict(req.get("sampling_params") or {})
    max_new = params.get("max_new_tokens", 128)
    params["max_new_tokens"] = 128 if max_new is None else int(max_new)
    if params["max_new_tokens"] < 0:
        raise GenerateError("max_new_tokens must be at least 0, got " + str(params["max_new_tokens"]))
    rid = req.get("rid") or uuid.uuid4().hex
    return ids, params, bool(req.get("stream", False)), str(rid)


def _out(rid: str, prompt_tokens: int, cached: int, chunk: Chunk, max_new: int, created: float, *, final: bool) -> dict:
    meta = {
        "id": rid,
        "finish_reason": {"type": "length", "length": max_new} if final else None,
        "prompt_tokens": prompt_tokens,
        "weight_version": "default",
        "completion_tokens": chunk.completion_tokens,
        "cached_tokens": cached,
    }
    if final:
        meta["e2e_latency"] = round(time.monotonic() - created, 6)
    return {"text": chunk.text, "output_ids": chunk.new_ids, "meta_info": meta}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(app: App, host: str, port: int) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"app": app})
    return _Server((host, port), handler)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return thread
