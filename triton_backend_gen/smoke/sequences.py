"""The smoke checks of a sequence model: a stateful model under Triton's sequence batcher, whose requests
carry a correlation ID and START/END flags, judged against ``reference.compute_sequence`` step by step."""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from functools import partial
from types import ModuleType
from typing import Self

from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.smoke.clients import (
    Endpoints,
    SequenceFlags,
    Stream,
    assert_healthy,
    error_text,
    infer,
    new_sequence_id,
    open_client,
)
from triton_backend_gen.smoke.compare import assert_outputs_match
from triton_backend_gen.smoke.model import ModelSpec
from triton_backend_gen.smoke.run import SmokeCheck

tritonutils = lazy_module("tritonclient.utils")

INTERLEAVED_SEQUENCES = 8  # the generated sequence models take at least this many at once
# The idle-timeout check waits out the model's timeout; longer timeouts are not waited for.
LONGEST_IDLE_WAIT_S = 10.0
# Past the timeout, how long more: Triton's sequence batcher looks for idle sequences now and then, not at
# once.
IDLE_MARGIN_S = 1.5


class Refused(Exception):
    """The server refused a request (its message)."""


class SequenceConnection:
    """One client of the model: a client of ``protocol``, or for a decoupled model a gRPC stream (whose
    requests must each get one data response)."""

    def __init__(self, spec: ModelSpec, protocol: str, endpoints: Endpoints) -> None:
        self.spec, self.protocol, self.endpoints = spec, protocol, endpoints
        self._stack = contextlib.ExitStack()
        self._requests = itertools.count()

    def __enter__(self) -> Self:
        if self.spec.decoupled:
            self._stream = self._stack.enter_context(Stream(self.endpoints))
        else:
            self._client = self._stack.enter_context(open_client(self.protocol, self.endpoints))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)

    def infer(self, inputs: dict, flags: SequenceFlags) -> dict:
        if not self.spec.decoupled:
            try:
                return infer(self.protocol, self._client, self.spec, inputs, flags)
            except tritonutils.InferenceServerException as err:
                raise Refused(error_text(err)) from None
        try:
            responses = self._stream.infer(self.spec, inputs, f"s{next(self._requests)}", flags)
        except AssertionError as err:
            raise Refused(str(err)) from None
        if len(responses) != 1:
            raise AssertionError(
                f"{len(responses)} responses with data to one request of a sequence, expected 1"
            )
        return responses[0]

    def assert_healthy(self, what: str) -> None:
        with open_client("grpc" if self.spec.decoupled else self.protocol, self.endpoints) as client:
            assert_healthy(client, self.spec, "grpc" if self.spec.decoupled else self.protocol, what)


def _steps(spec: ModelSpec, reference: ModuleType, count: int, seed: int) -> list[dict]:
    batch = 1 if spec.max_batch_size > 0 else None
    return [reference.make_inputs(batch, seed=seed + i) for i in range(count)]


def _run_sequence(
    connection: SequenceConnection,
    reference: ModuleType,
    steps: list[dict],
    sequence_id: int | str,
    *,
    end: bool = True,
    pause: float = 0.0,
    rng: random.Random | None = None,
    label: str = "",
) -> None:
    """Send ``steps`` as one sequence (START on the first, END on the last unless ``end`` is false), each
    answer compared with reference.compute_sequence of the steps so far."""
    expected = reference.compute_sequence(steps)
    for index, (inputs, want) in enumerate(zip(steps, expected, strict=False)):
        flags = SequenceFlags(sequence_id, start=index == 0, end=end and index == len(steps) - 1)
        try:
            got = connection.infer(inputs, flags)
        except Refused as err:
            raise AssertionError(
                f"{label}sequence {sequence_id!r}, request {index}: refused: {err}"
            ) from None
        assert_outputs_match(
            got, want, reference.TOLERANCE, f"{label}sequence {sequence_id!r}, request {index}"
        )
        if pause and rng is not None:
            # A random pause on purpose (no condition to poll): it shuffles how concurrent clients' requests
            # interleave, so that sequences start and end inside each other's batches.
            time.sleep(rng.uniform(0, pause))


def _check_sequence(spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints) -> str:
    steps = _steps(spec, reference, 6, seed=1)
    with SequenceConnection(spec, protocol, endpoints) as connection:
        _run_sequence(connection, reference, steps, new_sequence_id(spec))
    return (
        f"a sequence of {len(steps)} requests (START ... END): each answer equals reference.compute_sequence"
    )


def _check_interleaved(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    """Sequences from concurrent clients, interleaved: each runs two sequences one after the other, of lengths
    that differ, so that sequences start and end while others are in the middle of theirs (and of a batch)."""
    count, failures, sent = INTERLEAVED_SEQUENCES, [], []

    def client_run(number: int) -> None:
        rng = random.Random(number)
        try:
            with SequenceConnection(spec, "grpc", endpoints) as connection:
                for round_ in range(2):
                    steps = _steps(
                        spec, reference, 2 + (number + 3 * round_) % 5, seed=100 * number + 10 * round_
                    )
                    _run_sequence(
                        connection,
                        reference,
                        steps,
                        new_sequence_id(spec),
                        pause=0.01,
                        rng=rng,
                        label=f"client {number}: ",
                    )
                    sent.append(len(steps))
        except Exception as err:  # noqa: BLE001 - collected and reported by the check
            failures.append(
                str(err) if isinstance(err, AssertionError) else f"{type(err).__name__}: {error_text(err)}"
            )

    threads = [threading.Thread(target=client_run, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if any(thread.is_alive() for thread in threads):
        failures.append("no answer within 120 s")
    if failures:
        raise AssertionError(f"{len(failures)} of {count} clients failed: " + "; ".join(failures[:3]))
    return (
        f"{count} clients, {len(sent)} sequences interleaved ({sum(sent)} requests): each answer equals the "
        "running result of its own sequence"
    )


def _check_restart(spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints) -> str:
    sequence_id = new_sequence_id(spec)
    with SequenceConnection(spec, protocol, endpoints) as connection:
        _run_sequence(
            connection,
            reference,
            _steps(spec, reference, 3, seed=50),
            sequence_id,
            end=False,
            label="before the restart: ",
        )
        _run_sequence(
            connection,
            reference,
            _steps(spec, reference, 3, seed=60),
            sequence_id,
            label="restarted with START: ",
        )
        _run_sequence(
            connection,
            reference,
            _steps(spec, reference, 2, seed=70),
            sequence_id,
            label="started again after END: ",
        )
    return "an ID that starts again (mid-sequence, and after END) starts from the initial state"


def _assert_refused(connection: SequenceConnection, inputs: dict, flags: SequenceFlags, what: str) -> str:
    try:
        connection.infer(inputs, flags)
    except Refused as err:
        message = str(err)
    else:
        raise AssertionError(f"{what} was answered instead of refused")
    connection.assert_healthy(what)
    return message


def _check_unknown_sequence(
    spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints
) -> str:
    inputs = _steps(spec, reference, 1, seed=80)[0]
    with SequenceConnection(spec, protocol, endpoints) as connection:
        message = _assert_refused(
            connection,
            inputs,
            SequenceFlags(new_sequence_id(spec)),
            "a request for a sequence that never started",
        )
    return f"refused: {message}"


def _check_idle_timeout(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    idle = spec.sequence.idle_timeout_s
    if idle > LONGEST_IDLE_WAIT_S:
        return (
            f"not waited for: the idle timeout is {idle:g} s (max_sequence_idle_microseconds), over "
            f"{LONGEST_IDLE_WAIT_S:g} s"
        )
    sequence_id = new_sequence_id(spec)
    steps = _steps(spec, reference, 3, seed=90)
    with SequenceConnection(spec, "grpc", endpoints) as connection:
        _run_sequence(connection, reference, steps[:2], sequence_id, end=False, label="before idling: ")
        # The wait is the behaviour under test: the sequence batcher ends a sequence idle for longer than
        # max_sequence_idle_microseconds, and only the refusal of its next request tells a client it did.
        time.sleep(idle + IDLE_MARGIN_S)
        _assert_refused(
            connection,
            steps[2],
            SequenceFlags(sequence_id),
            f"a request {idle + IDLE_MARGIN_S:g} s after its sequence's last one (past the idle timeout)",
        )
        _run_sequence(
            connection, reference, steps[2:], sequence_id, label="started again after the timeout: "
        )
    return (
        f"a sequence idle for {idle + IDLE_MARGIN_S:g} s was ended (its next request refused); started "
        "again, from the initial state"
    )


def plan_sequence_checks(spec: ModelSpec, reference: ModuleType) -> list[SmokeCheck]:
    """The checks of a sequence model (a decoupled one over gRPC streams only)."""
    protocols = ("grpc",) if spec.decoupled else ("http", "grpc")
    plan = [SmokeCheck("sequence", p, partial(_check_sequence, spec, reference, p)) for p in protocols]
    plan += [
        SmokeCheck(
            f"{INTERLEAVED_SEQUENCES} interleaved sequences",
            "grpc",
            partial(_check_interleaved, spec, reference),
            quick=False,
        ),
        SmokeCheck("sequence restarted", "grpc", partial(_check_restart, spec, reference, "grpc")),
    ]
    plan += [
        SmokeCheck("request for an unknown sequence", p, partial(_check_unknown_sequence, spec, reference, p))
        for p in protocols
    ]
    idle = spec.sequence.idle_timeout_s
    waits = (
        f"waits {idle + IDLE_MARGIN_S:g} s on purpose: a sequence must stay idle past the model's idle "
        f"timeout ({idle:g} s) for Triton to end it"
        if idle <= LONGEST_IDLE_WAIT_S
        else ""
    )
    plan.append(
        SmokeCheck(
            "idle sequence timed out",
            "grpc",
            partial(_check_idle_timeout, spec, reference),
            waits,
            quick=False,
        )
    )
    return plan
