"""Added latency of a guarded request: the guardrails engine round trip (real NeMo Guardrails server, self check
input / self check output against the project's test model as guard model), as the gateway makes it
(`gateway.guardrails.GuardrailsClient.check`). A guarded request adds one input check before forwarding and one
output check after the answer (more for long streams: one per chunk).

    .venv/bin/python benchmarks/guardrails_bench.py [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from maasctl.builders.guardrails import engine_config_yaml
from maasctl.contract.guardrails import ConfigView, GuardModel, GuardrailsBinding
from maasctl.gateway.guardrails import GuardrailsClient
from maasctl.testenv.controlplane import ManagedProcess, free_port
from maasctl.testenv.guardrails import engine_venv

CONFIG = """\
rails:
  input: {flows: [self check input]}
  output: {flows: [self check output]}
prompts:
  - {task: self_check_input, content: "User message: {{ user_input }}. Should it be blocked (Yes or No)?"}
  - {task: self_check_output, content: "Bot message: {{ bot_response }}. Should it be blocked (Yes or No)?"}
"""


async def wait(url: str) -> None:
    async with httpx.AsyncClient(timeout=2) as http:
        for _ in range(600):
            try:
                if (await http.get(url)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} not ready")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main(n: int) -> None:
    venv = engine_venv()
    if venv is None:
        sys.exit("run hack/setup-guardrails.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_port, engine_port = free_port(), free_port()
        model = ManagedProcess("model", [str(Path(sys.executable).with_name("maasctl")), "testmodel",
                                         f"--port={model_port}", "--model=guard", "--block-word=FORBIDDEN"],
                               root / "model.log")
        view = ConfigView("ns", "bench", (GuardModel("main", "openai", "guard", f"http://127.0.0.1:{model_port}/v1"),),
                          CONFIG)
        (root / "configs" / "bench").mkdir(parents=True)
        (root / "configs" / "bench" / "config.yml").write_text(engine_config_yaml(view))
        engine = ManagedProcess("engine", [str(venv / "bin" / "nemoguardrails"), "server", "--config",
                                           str(root / "configs"), "--port", str(engine_port), "--disable-chat-ui"],
                                root / "engine.log", env={"HF_HUB_OFFLINE": "1"})
        model.start()
        engine.start()
        try:
            await wait(f"http://127.0.0.1:{model_port}/health")
            await wait(f"http://127.0.0.1:{engine_port}/v1/health")
            binding = GuardrailsBinding("bench", True, f"http://127.0.0.1:{engine_port}", False, 10.0)
            async with httpx.AsyncClient() as http:
                client = GuardrailsClient(http)
                await client.check(binding, "input", "warm up")
                direct, inputs, outputs = [], [], []
                for i in range(n):
                    t = time.perf_counter()
                    await http.post(f"http://127.0.0.1:{model_port}/v1/chat/completions",
                                    json={"model": "guard", "messages": [{"role": "user", "content": f"hi {i}"}]})
                    direct.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    verdict = await client.check(binding, "input", f"hello number {i}")
                    inputs.append(time.perf_counter() - t)
                    assert verdict.outcome == "passed", verdict
                    t = time.perf_counter()
                    await client.check(binding, "output", f"hello number {i}", f"echo: hello number {i}")
                    outputs.append(time.perf_counter() - t)
        finally:
            engine.stop()
            model.stop()
    print(f"requests: {n} sequential (one client), 2-core machine shared with other work")
    for name, values in (("guard model alone (direct call)", direct), ("input check (engine round trip)", inputs),
                         ("output check (engine round trip)", outputs),
                         ("added per guarded request (input + output)", [a + b for a, b in zip(inputs, outputs,
                                                                                           strict=True)])):
        print(f"{name:<45} p50 {statistics.median(values) * 1000:7.1f} ms   p99 {pct(values, 99) * 1000:7.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    asyncio.run(main(parser.parse_args().requests))
