"""The decoupled protocol, judged: what a gRPC stream's messages and the server's log say about how a model
kept it. A decoupled model answers each request with any number of responses and then the final flag
(TRITONSERVER_RESPONSE_COMPLETE_FINAL), once; four ways to break that are named as such:

- a response after the final flag, and the final flag twice: a client that trusts the flag loses them, or
  takes them for another request's. On the 2.51 server neither reaches the client: its gRPC frontend frees a
  request's stream state at the final flag, so a C++ backend that sends anything after it crashes the server
  (SIGSEGV; the backtrace in the log names TRITONBACKEND_ResponseSend or
  TRITONBACKEND_ResponseFactorySendFlags), and the python backend refuses the send in the stub ("Unable to
  send response. Response sender has been closed.", which the model raises or logs). Both are read from the
  lines the log gained during the check (:class:`LogWindow`); a server that passes them on is caught on the
  stream (:class:`StreamLedger`);
- an error response in mid-stream: an error not flagged final, after which the request goes on streaming
  (the client sees the error, then more data for the same request);
- a stream that never ends: no final flag within the per-request deadline (reference.py's
  STREAM_DEADLINE_S, else the suite's request timeout); the stream is then cancelled. The 2.51 server never
  unloads such a model (its gRPC frontend holds the request until a final flag that never comes): its
  shutdown waits out the exit timeout, so the suite gives it 2 s (BROKEN_STOP_TIMEOUT_S), then kills it.

The stream checks read the lines that the server's log (Endpoints.log_file, else the project's
build/tbgen/server.log, where tbgen's own servers write theirs) gained while each check ran.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

DEADLINE_NAME = "STREAM_DEADLINE_S"  # reference.py's optional per-request deadline of a stream, in seconds
# How long a crashing server may take to write its backtrace into the log: it symbolizes each frame as it
# goes, which on a loaded machine takes seconds; a backtrace whose log has not grown for _LOG_QUIET_S is
# complete.
CRASH_LOG_WAIT_S = 10.0
_LOG_QUIET_S = 2.0
_LOG_READ_LIMIT = 1 << 20  # the most of a log read per check: a check writes a few lines


@dataclass(frozen=True)
class StreamMessage:
    """One message of a gRPC stream (ModelStreamInferResponse), as the ledger reads it."""

    request_id: str | None  # None: the stream itself failed (the call ended with a gRPC error)
    result: Any = None  # tritonclient's InferResult of a response (None for an error)
    error: Any = None  # the InferenceServerException of an error response or of the stream
    final: bool | None = None  # the triton_final_response flag; None: not said (a refusal by the server)
    data: bool = False  # the response carries outputs (not the final flag alone)

    @property
    def ends_request(self) -> bool:
        """Whether the request's stream ends with this message: flagged final, or an error that says nothing
        of the flag (the server refused the request before a backend saw it)."""
        return bool(self.final) or (self.error is not None and self.final is None)


@dataclass
class _Request:
    sent_at: float
    responses: int = 0  # responses before the final flag (data or the flag alone), errors aside
    ended: bool = False
    error: str | None = None  # an error response not flagged final (the stream went on after it)
    error_after: int = 0  # how many responses came before that error


def responses_text(count: int) -> str:
    return f"{count} response" + ("" if count == 1 else "s")


class StreamLedger:
    """Every request of one stream and what has come for it; :meth:`receive` raises AssertionError naming a
    protocol fault. Time is given (monotonic seconds), so the decisions are testable without a server."""

    def __init__(self) -> None:
        self._requests: dict[str, _Request] = {}

    def sent(self, request_id: str, now: float) -> None:
        """A request went out (an id sent again starts over)."""
        self._requests[request_id] = _Request(now)

    def is_open(self, request_id: str) -> bool:
        request = self._requests.get(request_id)
        return request is not None and not request.ended

    def open_ids(self) -> list[str]:
        return [request_id for request_id, request in self._requests.items() if not request.ended]

    def receive(self, message: StreamMessage, error_text: str = "") -> str:
        """Take ``message`` in (``error_text``: its error's text); the request it belongs to (an error without
        a request id: the one open request). AssertionError for a protocol fault: the stream broke, a
        response for no request sent, one after its request's final flag, the final flag twice, data after an
        error response that was not flagged final."""
        request_id = message.request_id
        if request_id is None:
            raise AssertionError(f"the stream broke: {error_text}")
        if not request_id and message.error is not None and len(self.open_ids()) == 1:
            request_id = self.open_ids()[0]
        request = self._requests.get(request_id)
        if request is None:
            if message.error is not None:
                raise AssertionError(f"the stream returned an error: {error_text}")
            raise AssertionError(f"a response for unknown request id {request_id!r}")
        where = f"request {request_id}"
        if request.ended:
            if message.final:
                raise AssertionError(
                    f"the final flag came twice ({where}, after {responses_text(request.responses)})"
                )
            raise AssertionError(
                f"a response came after the final flag ({where}, response {request.responses + 1})"
            )
        if message.error is not None:
            if request.error is None:  # the first error counts
                request.error, request.error_after = error_text, request.responses
        elif message.data and request.error is not None:
            raise AssertionError(
                f"an error response mid-stream after {responses_text(request.error_after)}: "
                f"{request.error} ({where}: data responses followed it)"
            )
        else:
            request.responses += 1
        request.ended = message.ends_request
        return request_id

    def failed(self, request_id: str) -> str | None:
        """The error that request ``request_id`` reported before its stream ended (None: none)."""
        request = self._requests.get(request_id)
        return request.error if request is not None else None

    def wait_s(self, request_ids: list[str], now: float, deadline_s: float) -> float:
        """How long the earliest per-request deadline of the open ``request_ids`` is away (0 when past)."""
        ends = [self._requests[i].sent_at + deadline_s for i in request_ids if self.is_open(i)]
        return max(min(ends) - now, 0.0) if ends else deadline_s

    def overdue(self, request_ids: list[str], now: float, deadline_s: float) -> str | None:
        """The fault of the first of ``request_ids`` that is still open past its deadline, or None."""
        for request_id in request_ids:
            request = self._requests.get(request_id)
            if request is not None and not request.ended and now >= request.sent_at + deadline_s:
                return never_ended(request_id, deadline_s, request.responses)
        return None


NEVER_ENDED = "the stream never ended"


def never_ended(request_id: str | None, deadline_s: float, responses: int) -> str:
    """The fault of a stream whose final flag did not come within ``deadline_s``."""
    which = f" for request {request_id}" if request_id else ""
    return (
        f"{NEVER_ENDED}: no final flag{which} within {deadline_s:g} s (per-request deadline; "
        f"{responses_text(responses)} came)"
    )


def holds_the_server(details: Iterable[str]) -> bool:
    """Whether failures with ``details`` include a stream that never ended: the 2.51 server then never
    unloads its model, and its shutdown waits out the exit timeout (a run stops it with a short timeout)."""
    return any(NEVER_ENDED in detail for detail in details)


def stream_deadline(reference: ModuleType, default: float) -> float:
    """The per-request deadline of a model's streams: reference.py's STREAM_DEADLINE_S, else ``default``;
    AssertionError for a value that is not a positive number of seconds."""
    value = getattr(reference, DEADLINE_NAME, None)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise AssertionError(
            f"reference.py's {DEADLINE_NAME} must be a positive number of seconds, got {value!r}"
        )
    return float(value)


# ---- What the server's log says --------------------------------------------------------------------------

# The server's signal handler's first line; SIGINT and SIGTERM (2, 15) are a shutdown, the others a crash.
_SIGNAL = re.compile(r"^Signal \((?!(?:2|15)\))(\d+)\) received\.", re.MULTILINE)
# A frame of the server's backtrace: " 4# TRITONBACKEND_ResponseSend in /path/libtritonserver.so"
_FRAME = re.compile(r"^\s*\d+# (\S+) in (\S+)", re.MULTILINE)
_AFTER_FINAL_CALLS = {
    "TRITONBACKEND_ResponseSend": "a response came after the final flag",
    "TRITONBACKEND_ResponseFactorySendFlags": "the final flag came twice",
}
# What python_backend's stub raises when a model sends on a response sender after its final flag.
_SENDER_CLOSED = re.compile(r"^.*Response sender has been closed.*$", re.MULTILINE)


def log_faults(text: str) -> list[str]:
    """The protocol faults that lines of a server's log name: a crash in a call that sent after a final
    flag, a python stub that refused a send after it."""
    faults = []
    signal = _SIGNAL.search(text)
    if signal is not None:
        faults.append(_crash_fault(int(signal.group(1)), _FRAME.findall(text, signal.end())))
    closed = _SENDER_CLOSED.search(text)
    if closed is not None:
        faults.append(
            "a response came after the final flag, or the final flag twice: the model sent on a request's "
            "response sender after its final flag; the 2.51 python backend refuses that in the stub, so the "
            f"client saw nothing, and the log says: {_log_message(closed.group(0))}"
        )
    return faults


def _crash_fault(signal: int, frames: list[tuple[str, str]]) -> str:
    """What a crash whose backtrace has ``frames`` ((symbol, where)) names."""
    for index, (symbol, _where) in enumerate(frames):
        if symbol in _AFTER_FINAL_CALLS:
            caller = Path(frames[index + 1][1]).name if index + 1 < len(frames) else "the backend"
            return (
                f"{_AFTER_FINAL_CALLS[symbol]}: the server crashed (signal {signal}) in {symbol}, called by "
                f"{caller}; the 2.51 server's gRPC frontend frees a request's stream state at its final "
                "flag, so anything a backend sends for the request after it crashes the server"
            )
    return f"the server crashed (signal {signal}); its backtrace is in the server log"


def _log_message(line: str) -> str:
    """A log line without its glog prefix and quotes."""
    message = re.sub(r"^[IWEF]\d{4} \S+\s+\d+ \S+\] ", "", line.strip())
    return message.strip('"')


class LogWindow:
    """What a server's log gains from now on: the lines written while one check runs. Nothing to read
    without a log, or from one that does not grow (a server that logs elsewhere)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._start = _size(path)

    def text(self) -> str:
        """The text the log gained since this window opened."""
        size = _size(self.path)
        if self.path is None or size is None or size == self._start:
            return ""
        start = self._start if self._start is not None and size > self._start else 0
        with open(self.path, "rb") as log:
            log.seek(start)
            return log.read(_LOG_READ_LIMIT).decode(errors="replace")

    def faults(self, crash_wait_s: float = CRASH_LOG_WAIT_S, quiet_s: float = _LOG_QUIET_S) -> list[str]:
        """The protocol faults the gained lines name (log_faults). A crash's backtrace comes after its first
        line, slowly (the server symbolizes each frame): once a crash shows, the log is read until a frame
        names the call, it stopped growing for ``quiet_s``, or ``crash_wait_s`` passed."""
        text = self.text()
        if _SIGNAL.search(text) is None:
            return log_faults(text)
        ends = time.monotonic() + crash_wait_s
        grown_at, size = time.monotonic(), len(text)
        while time.monotonic() < ends and not _names_a_call(text):
            time.sleep(0.05)
            text = self.text()
            if len(text) != size:
                grown_at, size = time.monotonic(), len(text)
            elif time.monotonic() - grown_at > quiet_s:
                break
        return log_faults(text)


def _names_a_call(text: str) -> bool:
    return any(symbol.startswith("TRITONBACKEND_") for symbol, _ in _FRAME.findall(text))


def _size(path: Path | None) -> int | None:
    try:
        return path.stat().st_size if path is not None else None
    except OSError:
        return None
