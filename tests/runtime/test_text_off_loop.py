"""Text requests cost the event loop nothing it cannot spare: a full queue refuses with 429 before
a body is read, parsed or tokenized, and text is tokenized in a few worker threads, so health probes
and other requests are answered meanwhile (a megabyte of text takes the real tokenizer 1-3 s).

A real server on 127.0.0.1 over the emulated replica's contract, with tokenizers the test can hold
or count, and a device it holds busy with a gate; and the real MiniLM tokenizer.json, whose threads
must not wait for one another.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt
import pytest

from neuronserve.emulated import BERT_BASE, synthetic_manifest, tokenize_by_length
from neuronserve.protocol import TextRequest
from neuronserve.server import TOKENIZE_THREADS, ServeConfig, ServerState
from runtime_support import GatedEcho, LiveServer, minilm_dir, scrape_metrics

MODEL = "bert-base"
INFER = f"/v2/models/{MODEL}/infer"


class HeldTokenizer:
    """Tokenizes by length, each call held until the gate opens; counts calls and the most at once."""

    def __init__(self, held: bool = True) -> None:
        self.gate = threading.Event()
        if not held:
            self.gate.set()
        self.calls = 0
        self.running = 0
        self.peak = 0
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str], max_length: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            self.gate.wait(timeout=20)
            return tokenize_by_length(texts, max_length)
        finally:
            with self._lock:
                self.running -= 1


def _text(text: str) -> bytes:
    return json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [text]}]}).encode()


def _ids(first_id: int) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {"name": "input_ids", "shape": [1, 4], "datatype": "INT64", "data": [first_id] * 4},
                {"name": "attention_mask", "shape": [1, 4], "datatype": "INT64", "data": [1] * 4},
            ]
        }
    ).encode()


async def _until(condition: Callable[[], bool], what: str, limit_seconds: float = 20) -> None:
    deadline = time.monotonic() + limit_seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def test_a_full_queue_refuses_before_reading_parsing_or_tokenizing_the_body() -> None:
    device, tokenizer = GatedEcho(), HeldTokenizer(held=False)
    config = ServeConfig(max_batch_delay_ms=0, max_queue=1, batching=False, retry_after_seconds=3)
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, config, tokenizer) as server:
        assert server.state is not None and server.state.batcher is not None
        batcher = server.state.batcher
        before = scrape_metrics(server.url)
        async with aiohttp.ClientSession() as session:

            async def infer(body: bytes) -> tuple[int, str | None, Any]:
                async with session.post(server.url + INFER, data=body) as response:
                    return response.status, response.headers.get("Retry-After"), await response.json()

            releasing = asyncio.get_running_loop().call_later(15, device.gate.set)  # a failure must not hang
            held = [asyncio.create_task(infer(_ids(1)))]
            await _until(lambda: device.ran == [1], "request 1 to execute")
            held.append(asyncio.create_task(infer(_ids(2))))
            await _until(lambda: server.call(lambda: batcher.queue_depth) == 1, "request 2 to fill the queue")
            # Not JSON at all: refused for the full queue, so it was never parsed (else a 400).
            assert await infer(b"{not json") == (429, "3", {"error": "the queue is full (1 requests waiting)"})
            status, retry_after, _ = await infer(_text("a long text " * 10_000))
            assert (status, retry_after, tokenizer.calls) == (429, "3", 0)
            device.gate.set()
            releasing.cancel()
            assert [status for status, _, _ in await asyncio.gather(*held)] == [200, 200]
            # With room again, text is tokenized and served.
            assert (await infer(_text("served now")))[0] == 200 and tokenizer.calls == 1
        after = scrape_metrics(server.url)
        rejected = "neuronserve_requests_total{outcome=rejected}"
        assert after[rejected] - before[rejected] == 2


async def test_text_is_tokenized_off_the_event_loop_in_a_bounded_number_of_threads() -> None:
    device, tokenizer = GatedEcho(), HeldTokenizer()
    device.gate.set()
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, ServeConfig(), tokenizer) as server:
        timeout = aiohttp.ClientTimeout(total=5)  # the kubelet's probes time out in seconds
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

            async def infer(body: bytes) -> int:
                async with session.post(server.url + INFER, data=body) as response:
                    await response.read()
                    return response.status

            texts = [asyncio.create_task(infer(_text(f"text {i}"))) for i in range(TOKENIZE_THREADS + 2)]
            try:
                await _until(lambda: tokenizer.running == TOKENIZE_THREADS, "the tokenizer threads to be busy")
                # While every tokenizer thread is held, the loop still answers probes and token-id requests.
                async with session.get(server.url + "/v2/health/ready", timeout=timeout) as response:
                    assert response.status == 200
                async with session.post(server.url + INFER, data=_ids(7), timeout=timeout) as response:
                    assert response.status == 200
            finally:
                tokenizer.gate.set()
            assert await asyncio.gather(*texts) == [200] * (TOKENIZE_THREADS + 2)
        assert tokenizer.calls == TOKENIZE_THREADS + 2
        assert tokenizer.peak == TOKENIZE_THREADS


#: Run in a child process: without the fix the tokenizer's threads deadlock, the whole process with them.
SHORT_BESIDE_HELD_LONG = """
import json, sys, threading
from tokenizers import Tokenizer, pre_tokenizers
from neuronserve.protocol import tokenize_with

holding, release = threading.Event(), threading.Event()

class Hold:  # a step ahead of the real pre-tokenizer that holds the encoding of a text with "hold"
    def pre_tokenize(self, pretok):
        if any("hold" in split[0] for split in pretok.get_splits()):
            holding.set()
            release.wait(30)

tokenizer = Tokenizer.from_file(sys.argv[1])
tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.PreTokenizer.custom(Hold()), tokenizer.pre_tokenizer])
tokenize = tokenize_with(tokenizer, 128)
shapes, done = {}, {"long": threading.Event(), "short": threading.Event()}

def run(name, text):
    shapes[name] = list(tokenize([text], 128)[0].shape)
    done[name].set()

threading.Thread(target=run, args=("long", "hold " + "wordy " * 1000), daemon=True).start()
assert holding.wait(20), "the long text never reached the tokenizer"
threading.Thread(target=run, args=("short", "hello world"), daemon=True).start()
short_done = done["short"].wait(20)
long_was_held = not done["long"].is_set()
release.set()
assert done["long"].wait(20)
print(json.dumps({"short_done_while_long_held": short_done and long_was_held, "shapes": shapes}))
"""


def test_a_short_text_is_tokenized_while_another_thread_is_inside_the_real_tokenizer() -> None:
    # The server's tokenizer threads share one tokenizer: a short text must not wait for a long one
    # being encoded in the other thread (setting the truncation on each call did: about a second
    # per megabyte of the other text). The real MiniLM tokenizer.json, with a step ahead of its
    # pre-tokenizer that holds one encoding in progress until the short one is done.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", SHORT_BESIDE_HELD_LONG, str(minilm_dir() / "tokenizer.json")]
    try:
        child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("the tokenizer threads hung: the short text waited for the encoding in progress")
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["short_done_while_long_held"]
    # [CLS] hello world [SEP]; the long text truncated to the largest sequence bucket
    assert result["shapes"] == {"short": [1, 4], "long": [1, 128]}


async def test_a_text_received_whole_before_the_drain_is_tokenized_and_answered_not_refused() -> None:
    # The body arrived before SIGTERM; its tokenization ended after the drain had begun. It was
    # accepted work: the drain waits for it (within the grace period) instead of answering 503.
    device, tokenizer = GatedEcho(), HeldTokenizer()
    device.gate.set()
    with LiveServer(synthetic_manifest(BERT_BASE, MODEL), device, ServeConfig(), tokenizer) as server:
        assert server.state is not None
        state = server.state
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

            async def infer(body: bytes) -> int:
                async with session.post(server.url + INFER, data=body) as response:
                    await response.read()
                    return response.status

            text = asyncio.create_task(infer(_text("received before the drain")))
            await _until(lambda: tokenizer.running == 1, "the text to be tokenizing")
            draining = asyncio.wrap_future(server.start_soon(state.drain(20.0)))
            await _until(lambda: server.call(lambda: not state.accepting), "the drain to refuse new requests")
            assert await infer(_text("after the drain began")) == 503
            tokenizer.gate.set()
            assert await text == 200
            assert await draining


async def test_closing_drops_the_texts_waiting_for_a_tokenizer_thread() -> None:
    # serve() closes the state at exit: texts still queued for a tokenizer thread are dropped, so the
    # interpreter, which joins those threads, waits for the ones being tokenized only.
    tokenizer = HeldTokenizer()
    state = ServerState(ServeConfig())
    state.tokenize = tokenizer
    manifest = synthetic_manifest(BERT_BASE, MODEL)
    texts = [asyncio.ensure_future(state.tokenized(TextRequest(None, [f"text {i}"]), manifest)) for i in range(4)]
    await _until(lambda: tokenizer.running == TOKENIZE_THREADS, "the tokenizer threads to be busy")
    state.close()
    tokenizer.gate.set()
    await asyncio.wait(texts)
    assert [task.cancelled() for task in texts] == [False] * TOKENIZE_THREADS + [True] * (4 - TOKENIZE_THREADS)
    assert tokenizer.calls == TOKENIZE_THREADS
