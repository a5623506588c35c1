"""tbgen's own load generator, for when perf_analyzer is not available: asyncio gRPC (tritonclient.grpc.aio),
``concurrency`` requests in flight for ``seconds``, one latency per request; decoupled models are driven
through gRPC streams (one stream per worker, a request's latency ends with its final response)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.smoke.clients import wire_datatype

asyncio = lazy_module("asyncio")  # a stdlib module, but 10 ms of every tbgen start
np = lazy_module("numpy")
grpcclient = lazy_module("tritonclient.grpc")
grpc_aio = lazy_module("tritonclient.grpc.aio")


@dataclass
class LoadResult:
    latencies_us: list[float] = field(default_factory=list)
    responses: int = 0
    errors: int = 0
    seconds: float = 0.0
    first_error: str = ""


def run_load(
    url: str,
    model: str,
    inputs: Mapping[str, np.ndarray],
    datatypes: Mapping[str, str],
    *,
    concurrency: int,
    seconds: float,
    decoupled: bool,
    warmup_s: float = 0.5,
) -> LoadResult:
    """Keep ``concurrency`` requests in flight against ``model`` for ``seconds`` (after a warm-up); each input
    is sent as its declared datatype (``datatypes``; else its dtype's)."""
    return asyncio.run(_run(url, model, inputs, datatypes, concurrency, seconds, decoupled, warmup_s))


async def _run(url, model, inputs, datatypes, concurrency, seconds, decoupled, warmup_s) -> LoadResult:

    def request_inputs() -> list:
        built = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), wire_datatype(name, array, datatypes))
            tensor.set_data_from_numpy(array)
            built.append(tensor)
        return built

    result = LoadResult()
    client = grpc_aio.InferenceServerClient(url)
    try:
        loop = asyncio.get_running_loop()
        start_measuring = loop.time() + warmup_s
        stop = start_measuring + seconds
        worker = _stream_worker if decoupled else _unary_worker
        await asyncio.gather(
            *(
                worker(client, model, request_inputs, start_measuring, stop, result)
                for _ in range(concurrency)
            )
        )
        result.seconds = seconds
    finally:
        await client.close()
    return result


async def _unary_worker(client, model, request_inputs, start_measuring, stop, result: LoadResult) -> None:
    loop = asyncio.get_running_loop()
    tensors = request_inputs()
    while (now := loop.time()) < stop:
        began = time.perf_counter()
        try:
            await client.infer(model, tensors)
        except Exception as err:  # noqa: BLE001 - counted, the first one reported
            result.errors += 1
            result.first_error = result.first_error or str(err)
            continue
        if now >= start_measuring:
            result.latencies_us.append((time.perf_counter() - began) * 1e6)
            result.responses += 1


async def _stream_worker(client, model, request_inputs, start_measuring, stop, result: LoadResult) -> None:
    """One gRPC stream; the next request goes out when the previous one's final response came back."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def requests():
        while True:
            item = await queue.get()
            if item is None:
                return
            yield item

    tensors = request_inputs()
    responses = client.stream_infer(requests())
    try:
        while (now := loop.time()) < stop:
            began = time.perf_counter()
            await queue.put(
                {
                    "model_name": model,
                    "inputs": tensors,
                    "parameters": {"triton_enable_empty_final_response": True},
                }
            )
            streamed = await _read_until_final(responses, result)
            if now >= start_measuring:
                result.latencies_us.append((time.perf_counter() - began) * 1e6)
                result.responses += streamed
    finally:
        await queue.put(None)
        responses.cancel()


async def _read_until_final(responses, result: LoadResult) -> int:
    """Read one request's responses off the stream up to its final one (or an error, counted in ``result``):
    how many carried data."""
    streamed = 0
    async for response, error in responses:
        if error is not None:
            result.errors += 1
            result.first_error = result.first_error or str(error)
            break
        message = response.get_response()
        # triton_enable_empty_final_response: the final flag may come alone, on a response without outputs
        # (a decoupled model sends it with TRITONSERVER_RESPONSE_COMPLETE_FINAL and no response).
        final = message.parameters.get("triton_final_response")
        is_final = bool(final and final.bool_param)
        if not (is_final and not message.outputs):
            streamed += 1
        if is_final:
            break
    return streamed
