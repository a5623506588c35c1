"""tbgen bench's arithmetic and perf_analyzer's inputs and outputs, without a server."""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest

from triton_backend_gen.errors import UsageError
from triton_backend_gen.perf import (
    BenchReport,
    Level,
    compare,
    parse_concurrency,
    parse_duration,
    percentiles,
)
from triton_backend_gen.perf import perf_analyzer as pa


@pytest.mark.parametrize(
    "samples", [[5.0], [1.0, 2.0], list(range(1, 101)), [3.0, 1.0, 7.5, 2.25, 9.0, 4.0, 4.0]]
)
def test_percentiles_agree_with_numpy(samples):
    assert percentiles(samples) == pytest.approx(list(np.percentile(samples, [50, 90, 99])))


def test_percentiles_of_nothing_are_zero():
    assert percentiles([]) == [0.0, 0.0, 0.0]


def level(concurrency, throughput, p50, p99):
    return Level(
        concurrency=concurrency,
        requests=100,
        seconds=1.0,
        throughput=throughput,
        p50_us=p50,
        p90_us=p50,
        p99_us=p99,
    )


def test_compare_gives_ratios_at_the_levels_both_measured():
    this = BenchReport(
        "m", "grpc", "perf_analyzer", 1, "s", [level(1, 2000, 400, 800), level(8, 9000, 900, 3000)]
    )
    other = BenchReport(
        "m", "grpc", "perf_analyzer", 1, "s", [level(8, 10000, 1000, 2000), level(32, 1, 1, 1)]
    )
    (ratio,) = compare(this, other)
    assert ratio.concurrency == 8
    assert (
        ratio.throughput == pytest.approx(0.9)
        and ratio.p50 == pytest.approx(0.9)
        and ratio.p99 == pytest.approx(1.5)
    )
    zero = BenchReport("m", "grpc", "x", 1, "s", [level(8, 0, 0, 0)])
    assert compare(this, zero)[0].throughput == math.inf
    assert compare(zero, zero)[0].throughput == 1.0


def test_a_report_survives_json(tmp_path):
    report = BenchReport("m", "http", "tbgen (asyncio gRPC)", 4, "server", [level(1, 10.5, 1.0, 2.0)])
    report.write(tmp_path / "r.json")
    assert BenchReport.read(tmp_path / "r.json") == report
    (tmp_path / "bad.json").write_text('{"model": "m"}')
    with pytest.raises(UsageError, match="not a report of `tbgen bench`"):
        BenchReport.read(tmp_path / "bad.json")


def test_concurrency_and_duration_parsing():
    assert parse_concurrency("1,8,32") == [1, 8, 32]
    assert parse_duration("10s") == 10.0 and parse_duration("500ms") == 0.5 and parse_duration("2m") == 120.0
    assert parse_duration("3") == 3.0
    for bad in ("", "0", "a,b", "-1"):
        with pytest.raises(UsageError, match="--concurrency"):
            parse_concurrency(bad)
    for bad in ("0s", "fast", "-2s"):
        with pytest.raises(UsageError, match="--duration"):
            parse_duration(bad)


def test_perf_analyzer_input_data_is_one_exact_sample():
    inputs = {"INPUT0": np.arange(32, dtype=np.float16).reshape(2, 16), "INPUT1": np.ones((2, 16), np.int64)}
    data = pa.input_data(inputs, {}, batched=True)
    entry = data["data"][0]
    assert entry["INPUT0"]["shape"] == [16]
    decoded = np.frombuffer(base64.b64decode(entry["INPUT0"]["b64"]), dtype=np.float16)
    assert np.array_equal(decoded, inputs["INPUT0"][0])
    unbatched = pa.input_data({"IN": np.array([1, 2, 3], np.int32)}, {}, batched=False)
    assert unbatched["data"][0]["IN"]["shape"] == [3]


def test_perf_analyzer_input_data_sends_strings_and_bfloat16_as_declared():
    inputs = {
        "TEXT": np.array([[b"h\xc3\xa9", b"\xff"]], dtype=object),
        "W": np.array([[1.5, -2.0]], np.float32),
    }
    entry = pa.input_data(inputs, {"TEXT": "BYTES", "W": "BF16"}, batched=True)["data"][0]
    assert entry["TEXT"] == {"content": ["h\u00e9", "\ufffd"], "shape": [2]}
    bits = np.frombuffer(base64.b64decode(entry["W"]["b64"]), dtype=np.uint16)
    assert bits.tolist() == [0x3FC0, 0xC000]  # 1.5 and -2.0 as bfloat16


def test_perf_analyzer_command_and_csv(tmp_path):
    command = pa.command(
        tmp_path / "perf_analyzer",
        "add_sub",
        "127.0.0.1:8001",
        "grpc",
        8,
        data_file=tmp_path / "d",
        csv_file=tmp_path / "c.csv",
        batch_size=4,
        measurement_ms=1000,
        streaming=True,
    )
    assert command[1:7] == ["-m", "add_sub", "-u", "127.0.0.1:8001", "-i", "grpc"]
    assert "--concurrency-range=8:8" in command and "--measurement-interval=1000" in command
    assert command[command.index("-b") + 1] == "4" and "--streaming" in command
    row = pa.parse_csv("Concurrency,Inferences/Second,p50 latency,p99 latency\n8,4509.2,377,1588\n")
    assert row == {
        "Concurrency": 8.0,
        "Inferences/Second": 4509.2,
        "p50 latency": 377.0,
        "p99 latency": 1588.0,
    }
    with pytest.raises(ValueError):
        pa.parse_csv("Concurrency,Inferences/Second\n")
