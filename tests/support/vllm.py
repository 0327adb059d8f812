"""A vLLM unit on a sandbox host (the vLLM stand-in) and a request of a given size to it."""

from __future__ import annotations

from tests.support.node import Http, Node

MODEL = "standin/mha-13b-40k"


def vllm_unit(node: Node, utilization: str) -> str:
    """A vLLM unit (the stand-in, 13B, 40k context) on the node's address and port at ``utilization``."""
    return (
        "[Unit]\nDescription=vLLM server (stand-in, 13B, 40k context)\n\n[Service]\n"
        "Environment=HF_HOME=/models/.cache/huggingface\n"
        f"ExecStart=/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model {MODEL} \\\n"
        f"    --host {node.host.address} --port {node.port} \\\n"
        f"    --gpu-memory-utilization {utilization} \\\n"
        "    --max-num-batched-tokens 16384\n"
    )


def complete(node: Node, tokens: int) -> Http:
    """One /v1/completions of exactly ``tokens`` token ids."""
    return node.http("POST", "/v1/completions", {"model": MODEL, "prompt": [7] * tokens, "max_tokens": 8})
