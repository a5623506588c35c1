"""The decoupled protocol's faults, each named by the smoke suite and the fuzzer: a response after the final
flag, the final flag twice, an error response mid-stream, a stream that never ends (per-request deadline).

The decisions (smoke.stream_protocol's ledger of a stream, what lines of a server log name, how the fuzzer
reads a stream) are tested without a server. Then one project, whose repository holds the decoupled-backend
template's C++ model and models with the faults planted (tests/smoke/planted/: C++ in the project's library,
chosen by model name; Python beside each model.py), goes through `tbgen test` on the embedded 2.51 server:
each fault named in its model's stream checks, the clean model passing, no check waiting past its deadline,
nothing left running. What 2.51 does with each fault (smoke.stream_protocol says it too): a C++ backend that
sends anything after a final flag crashes the server, so each of those two faults needs a run of its own (one
is the last model of the shared run, the other runs alone); the python backend refuses such a send in the
stub, which only the server's log shows; an error mid-stream and a stream that never ends reach the client.
"""

from __future__ import annotations

import queue
import re
import shutil
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from conftest import check_results, replace_once, run_tbgen, triton_processes_of
from tritonclient.grpc import service_pb2

from triton_backend_gen.discovery import find_tritonserver
from triton_backend_gen.errors import ServerError
from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold import render_new_project
from triton_backend_gen.scaffold.compose import compose_into_project
from triton_backend_gen.smoke.clients import Endpoints, Stream
from triton_backend_gen.smoke.fuzz_requests import read_stream
from triton_backend_gen.smoke.model import ModelSpec, TensorSpec
from triton_backend_gen.smoke.stream_protocol import (
    LogWindow,
    StreamLedger,
    StreamMessage,
    holds_the_server,
    log_faults,
    stream_deadline,
)

PLANTED = Path(__file__).parent / "planted"
DEADLINE_S = 0.5  # the planted never_final models' per-request deadline (reference.py's STREAM_DEADLINE_S)
ERROR = "planted: an error in mid-stream"


# --- decisions: one stream's ledger -------------------------------------------------------------------------
def data(request_id: str = "r", final: bool = False) -> StreamMessage:
    return StreamMessage(request_id, result=object(), final=final, data=True)


def final_alone(request_id: str = "r") -> StreamMessage:
    return StreamMessage(request_id, result=object(), final=True)


def error(request_id: str = "r", final: bool | None = False) -> StreamMessage:
    return StreamMessage(request_id, error=Exception(ERROR), final=final)


def ledger_after(*messages: StreamMessage) -> StreamLedger:
    ledger = StreamLedger()
    ledger.sent("r", now=0.0)
    for message in messages:
        ledger.receive(message, ERROR if message.error is not None else "")
    return ledger


def test_a_stream_kept_to_the_protocol_ends_its_request_at_the_final_flag():
    ledger = ledger_after(data(), data())
    assert ledger.is_open("r") and ledger.open_ids() == ["r"]
    ledger.receive(final_alone())
    assert not ledger.is_open("r") and ledger.failed("r") is None
    assert not ledger_after(data(), data(final=True)).is_open("r")  # the flag on the last response


@pytest.mark.parametrize(
    ("late", "named"),
    [
        (data(), "a response came after the final flag (request r, response 4)"),
        (final_alone(), "the final flag came twice (request r, after 3 responses)"),
    ],
    ids=["response after the final flag", "final flag twice"],
)
def test_anything_after_the_final_flag_is_named(late, named):
    ledger = ledger_after(data(), data(), final_alone())
    with pytest.raises(AssertionError, match=re.escape(named)):
        ledger.receive(late)


def test_data_after_an_error_response_that_was_not_final_is_an_error_mid_stream():
    ledger = ledger_after(data(), error())
    with pytest.raises(AssertionError) as raised:
        ledger.receive(data())
    assert str(raised.value) == (
        f"an error response mid-stream after 1 response: {ERROR} (request r: data responses followed it)"
    )


def test_an_error_that_ends_the_request_is_its_failure_not_a_protocol_fault():
    closed_after = ledger_after(data(), error(), final_alone())  # the error, then the final flag alone
    flagged = ledger_after(data(), error(final=True))  # the error carries the final flag
    refused = ledger_after(error(final=None))  # the server refused it: no flag said
    for ledger in (closed_after, flagged, refused):
        assert not ledger.is_open("r") and ledger.failed("r") == ERROR


def test_an_error_without_a_request_id_belongs_to_the_one_open_request():
    ledger = ledger_after()
    assert ledger.receive(error(request_id=""), ERROR) == "r"
    with pytest.raises(AssertionError, match="unknown request id 'x'"):
        ledger.receive(data(request_id="x"))
    with pytest.raises(AssertionError, match="the stream broke: Socket closed"):
        ledger.receive(StreamMessage(None, error=Exception("Socket closed")), "Socket closed")


def test_a_request_without_its_final_flag_is_overdue_at_its_deadline():
    ledger = ledger_after(data())
    ledger.sent("s", now=1.0)
    assert ledger.wait_s(["r", "s"], now=0.25, deadline_s=2.0) == 1.75
    assert ledger.overdue(["r", "s"], now=1.9, deadline_s=2.0) is None
    assert ledger.overdue(["r", "s"], now=2.0, deadline_s=2.0) == (
        "the stream never ended: no final flag for request r within 2 s (per-request deadline; 1 response "
        "came)"
    )
    assert ledger.wait_s(["r"], now=5.0, deadline_s=2.0) == 0.0


def test_a_run_with_a_stream_that_never_ended_is_told_its_server_will_not_unload():
    assert holds_the_server(["outputs differ", "x: the stream never ended: no final flag within 1 s"])
    assert not holds_the_server(["outputs differ", "a response came after the final flag"])


def test_the_per_request_deadline_is_reference_pys_or_the_default():
    class Reference:
        pass

    assert stream_deadline(Reference, 30.0) == 30.0
    Reference.STREAM_DEADLINE_S = 2
    assert stream_deadline(Reference, 30.0) == 2.0
    for wrong in (0, -1, "5", True):
        Reference.STREAM_DEADLINE_S = wrong
        with pytest.raises(AssertionError, match="STREAM_DEADLINE_S must be a positive number of seconds"):
            stream_deadline(Reference, 30.0)


# --- decisions: what a server log names (lines as the 2.51 server writes them) ------------------------------
def crash(call: str) -> str:
    return (
        "Signal (11) received.\n"
        " 0# 0x00005567B280952D in /venv/pytriton/tritonserver/bin/tritonserver\n"
        " 1# 0x00007FD26BC5A050 in /lib/x86_64-linux-gnu/libc.so.6\n"
        " 3# 0x00007FD26C648390 in /venv/nvidia_pytriton.libs/libtritonserver-717102f0.so\n"
        f" 4# {call} in /venv/nvidia_pytriton.libs/libtritonserver-717102f0.so\n"
        " 5# 0x00007FD26AAF0A79 in /p/build/tbgen/backends/p/libtriton_p.so\n"
    )


SENDER_CLOSED = (
    'E1205 23:11:53.657545 28299 model.py:154] "seed0: cannot close the stream: Unable to send response. '
    'Response sender has been closed."\n'
)


def test_a_crash_in_a_send_after_the_final_flag_is_named_from_its_backtrace():
    [twice] = log_faults("I1205 loaded\n" + crash("TRITONBACKEND_ResponseFactorySendFlags"))
    assert twice.startswith("the final flag came twice: the server crashed (signal 11) in ")
    assert "TRITONBACKEND_ResponseFactorySendFlags, called by libtriton_p.so" in twice
    [after] = log_faults(crash("TRITONBACKEND_ResponseSend"))
    assert after.startswith("a response came after the final flag: the server crashed (signal 11)")
    assert log_faults(crash("TRITONSERVER_InferenceRequestNew")) == [
        "the server crashed (signal 11); its backtrace is in the server log"
    ]
    assert log_faults("Signal (15) received.\nSignal (2) received.\n") == []  # a shutdown, not a crash


def test_a_python_stubs_refusal_of_a_send_after_the_final_flag_is_named():
    [refused] = log_faults(SENDER_CLOSED)
    assert refused.startswith("a response came after the final flag, or the final flag twice")
    assert refused.endswith(
        "the log says: seed0: cannot close the stream: Unable to send response. Response sender has been "
        "closed."
    )
    assert log_faults('I1205 23:11:53.6 1 model.py:9] "a: stream cancelled by the client"\n') == []


def test_the_log_window_reads_only_what_the_log_gained(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(SENDER_CLOSED)  # before the check: not its lines
    window = LogWindow(log)
    assert window.text() == "" and window.faults() == []
    with log.open("a") as out:
        out.write(crash("TRITONBACKEND_ResponseSend"))
    assert window.faults()[0].startswith("a response came after the final flag")
    assert LogWindow(None).faults() == [] and LogWindow(tmp_path / "none.log").text() == ""


def test_a_crash_whose_backtrace_does_not_come_is_named_once_the_log_is_quiet(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("")
    window = LogWindow(log)
    log.write_text("Signal (6) received.\n")
    started = time.monotonic()
    assert window.faults(crash_wait_s=5.0, quiet_s=0.2) == [
        "the server crashed (signal 6); its backtrace is in the server log"
    ]
    assert time.monotonic() - started < 2.0  # quiet for the while given: the backtrace is complete


# --- decisions: how the fuzzer reads one request's stream ---------------------------------------------------
def message(final: bool | None = None, outputs: int = 0, error_message: str = ""):
    """A ModelStreamInferResponse of request "fuzz" as the 2.51 server sends it."""
    sent = service_pb2.ModelStreamInferResponse(error_message=error_message)
    sent.infer_response.id = "fuzz"
    if final is not None:
        sent.infer_response.parameters["triton_final_response"].bool_param = final
    for index in range(outputs):
        sent.infer_response.outputs.add(name=f"OUT{index}", datatype="INT32", shape=[1])
        sent.infer_response.raw_output_contents.append(b"\0" * 4)
    return sent


class Deadline(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self):
        return "Deadline Exceeded"


def call(*messages, then: Exception | None = None):
    """A stream call that yields ``messages``, then ends (or raises ``then``)."""
    yield from messages
    if then is not None:
        raise then


def test_the_fuzzer_reads_a_stream_to_its_final_flag_and_names_what_breaks_the_protocol():
    responses: list = []
    assert read_stream(call(message(False, 1), message(True)), "fuzz", responses, False) == "ok"
    assert len(responses) == 2
    refused = call(message(error_message="inference input 'IN' data-type is 'FP32'"))
    assert read_stream(refused, "fuzz", [], False) == "stream error"
    failed_then_closed = call(message(False, 1), message(False, error_message=ERROR), message(True))
    assert read_stream(failed_then_closed, "fuzz", [], False) == "stream error"
    faults = {
        "a response came after the final flag (request fuzz, response 2)": [message(True), message(False, 1)],
        "the final flag came twice (request fuzz, after 2 responses)": [
            message(False, 1),
            message(True),
            message(True),
        ],
        "an error response mid-stream after 1 response": [
            message(False, 1),
            message(False, error_message=ERROR),
            message(False, 1),
        ],
    }
    for named, sent in faults.items():
        with pytest.raises(AssertionError, match=re.escape(named)):
            read_stream(call(*sent), "fuzz", [], False)
    never = (
        "the stream never ended: no final flag for request fuzz within 2 s (per-request deadline; 1 response"
    )
    with pytest.raises(AssertionError, match=re.escape(never)):
        read_stream(call(message(False, 1), then=Deadline()), "fuzz", [], False, deadline_s=2.0)


# --- served: the faults planted, one project, `tbgen test` -------------------------------------------------
CPP_FAULTS = ("cpp_error_mid", "cpp_never_final", "cpp_after_final")  # the crash last: see the module doc
PYTHON_FAULTS = ("py_after_final", "py_final_twice", "py_error_mid", "py_never_final")
CRASHES_ALONE = "cpp_final_twice"  # the other crash: a run of its own
NAMED = {
    "cpp_error_mid": f"an error response mid-stream after 1 response: {ERROR} (request seed0",
    "py_error_mid": f"an error response mid-stream after 1 response: {ERROR} (request seed0",
    "cpp_never_final": f"the stream never ended: no final flag for request seed0 within {DEADLINE_S:g} s",
    "py_never_final": f"the stream never ended: no final flag for request seed0 within {DEADLINE_S:g} s",
    "cpp_after_final": "a response came after the final flag: the server crashed (signal 11) in "
    "TRITONBACKEND_ResponseSend, called by libtriton_planted.so",
    "cpp_final_twice": "the final flag came twice: the server crashed (signal 11) in "
    "TRITONBACKEND_ResponseFactorySendFlags, called by libtriton_planted.so",
    "py_after_final": "a response came after the final flag, or the final flag twice: the model sent on a "
    "request's response sender after its final flag",
    "py_final_twice": "a response came after the final flag, or the final flag twice: the model sent on a "
    "request's response sender after its final flag",
}


def plant_cpp(project: Path) -> None:
    """The faults of tests/smoke/planted/faults.h wired into the project's generated C++ plumbing."""
    source = project / "src" / "planted.cc"
    shutil.copy(PLANTED / "faults.h", project / "src" / "faults.h")
    edits = [
        ('#include "tensors.h"\n', '#include "tensors.h"\n#include "faults.h"\n'),
        (
            "  bool succeeded_ = false;",
            "  planted_faults::Fault fault_ = planted_faults::Fault::kNone;\n  size_t sent_ = 0;\n"
            "  bool succeeded_ = false;",
        ),
        (
            "  batching_ = batching;\n",
            "  batching_ = batching;\n  fault_ = planted_faults::FaultOf(model_name);\n",
        ),
        (
            "  closed_ = last;\n  return true;\n",
            "  closed_ = last;\n  planted_faults::AfterResponse(factory_.get(), fault_, ++sent_);\n"
            "  return true;\n",
        ),
        (
            "    closed_ = true;\n    LOG_IF_ERROR(\n        TRITONBACKEND_ResponseFactorySendFlags(\n"
            "            factory_.get(), TRITONSERVER_RESPONSE_COMPLETE_FINAL),\n"
            '        "failed sending the final flag");\n',
            "    closed_ = true;\n    planted_faults::SendFinalFlag(factory_.get(), fault_);\n"
            "    if (fault_ == planted_faults::Fault::kAfterFinal) {  // a data response after it\n"
            "      closed_ = false;\n      Next();\n      Send(false);\n      closed_ = true;\n    }\n",
        ),
    ]
    for old, new in edits:
        replace_once(source, old, new)


def plant_python(model: Path) -> None:
    """The faults of tests/smoke/planted/faults.py wired into the generated model.py of a decoupled python
    model."""
    version = model / "1"
    shutil.copy(PLANTED / "faults.py", version / "planted_faults.py")
    source = version / "model.py"
    replace_once(source, "import compute  #", "import planted_faults\nimport compute  #")
    sent = "sender.send(pb_utils.InferenceResponse(output_tensors=tensors))  # the stream stays open\n"
    then = " " * 16 + "planted_faults.after_response(sender, pb_utils, self.model_name, index)\n"
    replace_once(source, sent, sent + then)
    replace_once(
        source,
        "                    sender.send(flags=FINAL)  #",
        "                    planted_faults.send_final(sender, pb_utils, self.model_name, FINAL)  #",
    )


@pytest.fixture(scope="module")
def planted(tmp_path_factory, server_or_skip_module) -> Path:
    """A decoupled-backend project (C++, its library called planted) whose repository holds the template's
    model and the planted faults, each added by `tbgen add model`'s stage function (compose_into_project,
    without updating the generation record, which only `tbgen update` reads: a second less per model)."""
    root = render_new_project(
        "decoupled-backend", tmp_path_factory.mktemp("protocol") / "planted", {"triton_version": "24.10"}
    )
    for name in PYTHON_FAULTS + CPP_FAULTS + (CRASHES_ALONE,):
        given = {"language": "python"} if name.startswith("py_") else {}
        template = "decoupled-backend" if given else None
        compose_into_project(load_project(root), name, template, given)
        if name.endswith("never_final"):
            with (root / "references" / f"{name}.py").open("a") as reference:
                reference.write(f"\nSTREAM_DEADLINE_S = {DEADLINE_S}  # planted: its streams never end\n")
        if given:
            plant_python(root / "model_repository" / name)
    plant_cpp(root)
    return root


@pytest.fixture(scope="module")
def server_or_skip_module():
    """The tritonserver tbgen finds (the embedded one in CI), or skip saying why there is none."""
    try:
        return find_tritonserver()
    except ServerError as err:
        pytest.skip(f"no tritonserver to check against: {err.message}")


def details(output: str) -> dict[str, tuple[str, float]]:
    """check name -> (its detail, its seconds), from what `tbgen test` prints off a terminal."""
    found: dict[str, tuple[str, float]] = {}
    name = None
    for line in output.splitlines():
        match = re.match(r"^(?:pass|FAIL)  (.+?)  (\d+\.\d\d) s$", line)
        if match:
            name = match.group(1)
            found[name] = ("", float(match.group(2)))
        elif name is not None and line.startswith("    "):
            found[name] = ((found[name][0] + " " + line.strip()).strip(), found[name][1])
        else:
            name = None
    return found


@pytest.mark.slow
@pytest.mark.xdist_group("decoupled-protocol")
def test_tbgen_test_names_each_fault_the_clean_model_passes_and_nothing_is_left(planted):
    started = time.monotonic()
    done = run_tbgen("test", str(planted), timeout=300)
    seconds = time.monotonic() - started
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-3000:]
    verdicts, said = check_results(done.stdout), details(done.stdout)
    clean = {name: verdict for name, verdict in verdicts.items() if name.startswith("repeat_int32: ")}
    assert len(clean) > 10 and set(clean.values()) == {"pass"}, clean
    for model in PYTHON_FAULTS + CPP_FAULTS:
        detail, check_s = said[f"{model}: stream [grpc]"]
        assert verdicts[f"{model}: stream [grpc]"] == "FAIL"
        if model in ("py_after_final", "py_final_twice"):  # the stub's log line may come after the check
            detail = " ".join(text for name, (text, _) in said.items() if name.startswith(f"{model}: "))
        assert NAMED[model] in detail, (model, detail)
        if model.endswith("never_final"):  # failed at its deadline, and so did each of its streams
            assert check_s < DEADLINE_S + 2, (model, check_s)
            assert said[f"{model}: request without responses [grpc]"][0].startswith("the stream never ended")
    assert triton_processes_of(planted) == [], "left running"
    # The crash ends the run (the checks after it are not run): the shutdown waits for nothing.
    assert seconds < 90, seconds


@pytest.mark.slow
@pytest.mark.xdist_group("decoupled-protocol")
def test_a_cpp_final_flag_sent_twice_is_named_from_the_crash_it_causes(planted):
    done = run_tbgen("test", str(planted), "--model", CRASHES_ALONE, timeout=300)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-3000:]
    detail, _ = details(done.stdout)["stream [grpc]"]
    assert NAMED[CRASHES_ALONE] in detail, detail
    assert triton_processes_of(planted) == [], "left running"


def test_the_stream_builds_its_requests_with_the_installed_tritonclient():
    """Stream.send builds each request with tritonclient's own (private) builder, as async_stream_infer does:
    a tritonclient whose builder changed fails here, by name, rather than every decoupled check."""
    spec = ModelSpec(
        "m", 0, True, False, (TensorSpec("IN", "INT32", (2,)),), (TensorSpec("OUT", "INT32", (1,)),)
    )
    stream = Stream.__new__(Stream)  # no channel: only the request is built and queued
    stream._ledger, stream._requests = StreamLedger(), queue.Queue()
    stream.send(spec, {"IN": np.array([1, 2], np.int32)}, request_id="r1", parameters={"p": 3})
    request = stream._requests.get_nowait()
    assert (request.model_name, request.id, [i.name for i in request.inputs]) == ("m", "r1", ["IN"])
    assert request.parameters["triton_enable_empty_final_response"].bool_param
    assert request.parameters["p"].int64_param == 3 and len(request.raw_input_contents) == 1
    assert Endpoints("a:1", "a:2").log_file is None
