"""Signals and shutdowns: what lets every process and container tbgen starts be stopped by tbgen.

- ``stop_on_signals``: within the block SIGTERM/SIGHUP raise :class:`SignalReceived` (a KeyboardInterrupt, as
  Ctrl-C's SIGINT already is), so that ``with server:`` blocks unwind and stop what they started;
- ``signals_deferred``: a shutdown in progress is not interrupted half-way by a second Ctrl-C; the signals
  are delivered once it is done;
- ``signals_recorded``: work that must finish or be undone as a whole (a project moved into place, an update
  written) only records SIGINT/SIGTERM/SIGHUP, whichever thread the kernel hands them to; the caller undoes
  what it must, then ``raise_received`` delivers them as exceptions.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager


class SignalReceived(KeyboardInterrupt):
    """SIGTERM or SIGHUP turned into an exception, so that `with TritonServer(...)` unwinds and stops it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _handled(signals: tuple[int, ...], handler) -> Iterator[None]:
    """``handler`` for ``signals`` within the block, the handlers before restored afterwards. Only the main
    thread can install handlers; elsewhere the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


def stop_on_signals(
    signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP),
) -> AbstractContextManager[None]:
    """Within the block, SIGTERM/SIGHUP raise SignalReceived (SIGINT already raises KeyboardInterrupt);
    outside the main thread the block runs unchanged."""

    def raise_signal(signum: int, _frame) -> None:
        raise SignalReceived(signum)

    return _handled(signals, raise_signal)


class signals_deferred:
    """Hold SIGINT/SIGTERM/SIGHUP during a shutdown so a second Ctrl-C cannot interrupt it half-way;
    they are delivered once it is done."""

    def __enter__(self) -> None:
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def __exit__(self, *exc_info) -> None:
        if self._previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._previous)


@contextmanager
def signals_recorded() -> Iterator[list[int]]:
    """Within the block SIGINT/SIGTERM/SIGHUP are appended to the yielded list instead of acting; the handlers
    before are restored afterwards. Outside the main thread nothing is recorded."""
    received: list[int] = []
    with _handled(STOP_SIGNALS, lambda signum, _frame: received.append(signum)):
        yield received


def raise_received(received: list[int]) -> None:
    """Deliver the first of ``received`` signals as an exception: KeyboardInterrupt for SIGINT, else
    SignalReceived; nothing when the list is empty."""
    if received:
        raise KeyboardInterrupt if received[0] == signal.SIGINT else SignalReceived(received[0])
