"""The decisions about a server's model control and address, without a server: the flags `tbgen serve` passes
for --model-control-mode, and how --url reads (the served behaviour: tests/cli/test_test_url.py)."""

from __future__ import annotations

import pytest

from triton_backend_gen.errors import UsageError
from triton_backend_gen.runtime.control_mode import POLL_SECONDS, control_mode_args
from triton_backend_gen.runtime.remote import ServerAddress, parse_server_address, parse_url


@pytest.mark.parametrize(
    ("mode", "project", "only", "expected"),
    [
        (None, True, (), ("explicit", ("--model-control-mode=explicit", "--load-model=*"))),
        (None, False, (), ("none", ("--model-control-mode=none",))),
        (
            None,
            True,
            ("bls", "add_sub"),
            ("explicit", ("--model-control-mode=explicit", "--load-model=bls", "--load-model=add_sub")),
        ),
        ("explicit", False, (), ("explicit", ("--model-control-mode=explicit", "--load-model=*"))),
        (
            "poll",
            True,
            (),
            ("poll", ("--model-control-mode=poll", f"--repository-poll-secs={POLL_SECONDS}")),
        ),
        ("none", True, (), ("none", ("--model-control-mode=none",))),
    ],
)
def test_the_flags_of_each_mode(mode, project, only, expected):
    assert control_mode_args(mode, project=project, only=only) == expected


def test_an_unknown_mode_is_a_usage_error_naming_the_modes():
    with pytest.raises(UsageError) as raised:
        control_mode_args("sometimes", project=True)
    assert "'sometimes'" in raised.value.message
    assert "explicit, poll or none" in raised.value.hint


@pytest.mark.parametrize("mode", ["poll", "none"])
def test_some_models_alone_need_explicit_mode(mode):
    with pytest.raises(UsageError) as raised:
        control_mode_args(mode, project=True, only=("add_sub",))
    assert "--model" in raised.value.message and "Drop --model-control-mode" in raised.value.hint


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("127.0.0.1:8000", ServerAddress("127.0.0.1:8000", "127.0.0.1:8001")),
        ("localhost:8000,other:9001", ServerAddress("localhost:8000", "other:9001")),
        ("h:1,h:2,h:3", ServerAddress("h:1", "h:2", "h:3")),
        ("[::1]:8000", ServerAddress("[::1]:8000", "[::1]:8001")),
    ],
)
def test_url_reads_http_then_grpc_then_metrics(url, expected):
    assert parse_server_address(url) == expected


@pytest.mark.parametrize("url", ["nowhere", "127.0.0.1", ":8000", "h:8000,h", "h:1,h:2,h:3,h:4", "h:99999"])
def test_a_url_that_is_not_host_port_is_a_usage_error(url):
    with pytest.raises(UsageError) as raised:
        parse_server_address(url)
    assert "HOST:PORT" in raised.value.message and "--url 127.0.0.1:8000" in raised.value.hint


def test_bench_takes_http_and_grpc_only():
    assert parse_url("h:8000") == ("h:8000", "h:8001")
    with pytest.raises(UsageError):
        parse_url("h:1,h:2,h:3")
