"""runtime.server's decisions, without a server: which log lines explain a failure, which ports a run
takes."""

from __future__ import annotations

import textwrap

import pytest

from triton_backend_gen.errors import ServerError
from triton_backend_gen.runtime import server


def test_a_traceback_follows_its_error_until_the_next_glog_line():
    log = textwrap.dedent("""\
        I1202 17:05:05.1 8681 model_lifecycle.cc:1] "loading: add_sub:1"
        E1202 17:05:06.1 8681 model_lifecycle.cc:2] "failed to load 'add_sub'"
        Traceback (most recent call last):
          File "model.py", line 1, in <module>

        | add_sub | 1 | UNAVAILABLE: failed |
        RuntimeError: boom
        I1202 17:05:07.1 8681 server.cc:3] "Waiting for in-flight requests"
        a plain line after it
        """)
    assert server.relevant_log_lines(log) == [
        """E1202 17:05:06.1 8681 model_lifecycle.cc:2] "failed to load 'add_sub'\"""",
        "Traceback (most recent call last):",
        '  File "model.py", line 1, in <module>',
        "RuntimeError: boom",
    ]


def test_cpu_noise_ends_what_a_picked_line_carries():
    log = 'E1202 17:05:06.1 8681 x.cc:2] "failed"\nW1202 17:05:06.2 8681 y.cc:2] "NVML: no GPU"\ntrailing\n'
    assert server.relevant_log_lines(log) == ['E1202 17:05:06.1 8681 x.cc:2] "failed"']


def test_ports_asked_for_twice_are_refused():
    port = server.free_port()
    with pytest.raises(ServerError, match="must differ"):
        server._check_requested_ports(server.LOOPBACK, {"http": port, "grpc": port, "metrics": 0})


def test_a_port_picked_for_the_run_is_none_it_already_takes(monkeypatch):
    offered = iter([8001, 8000, 9000])
    monkeypatch.setattr(server, "free_port", lambda host: next(offered))
    assert server._free_port_except(server.LOOPBACK, {8000, 8001}) == 9000
