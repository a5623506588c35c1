"""`tbgen test --chaos`: a python stub killed while requests flow, and a BLS model's callees unloaded and
loaded again; each step named, judged by the rule in smoke/chaos.py, nothing left hanging or running.

The decisions are tested on outcomes made here; the slow test runs `tbgen test --chaos` once on a python BLS
project (bls_sync calls add_sub and add_sub_2) with the embedded 2.51 server, which keeps answering that a
model whose stub was killed is READY (server issue #8604).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from conftest import check_results, new_project, run_tbgen, triton_processes_of

from triton_backend_gen import versions
from triton_backend_gen.project import ModelEntry
from triton_backend_gen.runtime.stub_watch import Stub
from triton_backend_gen.smoke.chaos import (
    DEADLINE_S,
    Answer,
    Flow,
    KillOutcome,
    OutageOutcome,
    baseline_problem,
    bls_callees,
    failures_text,
    flowing,
    judge_kill,
    judge_outage,
    judge_return,
    kill_order,
)
from triton_backend_gen.smoke.stub_health import ISSUE_8604, ServedRelease

OLD = ServedRelease("2.51.0", versions.resolve("24.10"))  # before python instance health (#8604)
NEW = ServedRelease("2.64.0", versions.resolve("26.04"))  # the model and the server turn not ready
STUB = Stub(pid=4321, model="add_sub", instance="add_sub_0_0", started=1)
NOT_HEALTHY = "Stub process 'add_sub_0_0' is not healthy."


def ok(at: float) -> Answer:
    return Answer(at, 0.01)


def failed(at: float, error: str = NOT_HEALTHY, seconds: float = 1.0) -> Answer:
    return Answer(at, seconds, error)


BEFORE = (ok(0.0), ok(0.1))


def killed(**given) -> KillOutcome:
    """An outcome of a stub killed at t=1 on the 2.51 server: answered before, failing after, still READY."""
    fields = dict(
        model="add_sub",
        stub=STUB,
        server=OLD,
        before=BEFORE,
        at=1.0,
        after=(failed(1.0), failed(2.0), failed(3.0)),
    )
    return KillOutcome(**{**fields, **given})


# --- a killed stub ----------------------------------------------------------------------------------------
def test_a_stub_killed_on_2_51_fails_naming_the_instance_the_failed_requests_and_the_ready_claim():
    result = judge_kill(killed())
    assert result.name == "chaos: stub killed add_sub" and not result.passed
    assert "instance add_sub_0_0 (pid 4321, SIGKILL)" in result.detail
    assert "did not recover it: no new stub served add_sub_0_0" in result.detail
    assert "still claimed the model READY (and itself ready) all the while" in result.detail
    assert ISSUE_8604 in result.detail
    assert f"3 of 3 requests failed, each within 1.00 s; the first: {NOT_HEALTHY}" in result.detail
    assert "`tbgen update --triton-version 26.04`" in result.detail


def test_a_stub_killed_passes_where_the_server_says_the_model_is_not_ready():
    result = judge_kill(killed(server=NEW, not_ready_at=1.3, server_not_ready=True))
    assert result.passed
    assert "not ready 0.3 s after the kill, and that it is not ready itself" in result.detail
    assert "3 of 3 requests failed" in result.detail and ISSUE_8604 not in result.detail
    only_model = judge_kill(killed(server=NEW, not_ready_at=1.3))
    assert only_model.passed and "/v2/models/add_sub/ready) sees it" in only_model.detail


def test_a_stub_killed_passes_where_the_server_recovers_it_and_counts_only_the_failures_before():
    after = (failed(1.0), failed(2.0), ok(3.5), ok(3.6), failed(3.7, "later"))
    result = judge_kill(killed(after=after, new_stub_at=3.0))
    assert result.passed
    assert "recovered it: a new stub served add_sub_0_0 and the model answered correctly 2.5 s after" in (
        result.detail
    )
    assert "2 of 2 requests failed" in result.detail


def test_a_new_stub_that_answers_nothing_is_no_recovery():
    result = judge_kill(killed(new_stub_at=2.5))
    assert not result.passed and "A new stub served add_sub_0_0, but the model answered no request" in (
        result.detail
    )


def test_a_stub_killed_passes_when_other_instances_answer_every_request():
    result = judge_kill(killed(after=(ok(1.0), ok(1.1))))
    assert result.passed and "all 2 requests were answered correctly" in result.detail


def test_a_hung_or_wrong_answer_after_a_kill_fails_even_where_the_model_turned_not_ready():
    hung = Answer(1.0, DEADLINE_S, f"no answer within {DEADLINE_S:g} s (timed out)", hung=True)
    result = judge_kill(killed(server=NEW, not_ready_at=1.2, after=(hung,)))
    assert not result.passed and "1 of them hung" in result.detail
    wrong = Answer(1.0, 0.01, "wrong answer: OUTPUT0: values differ", wrong=True)
    assert not judge_kill(killed(server=NEW, not_ready_at=1.2, after=(wrong,))).passed


def test_nothing_is_killed_without_a_stub_or_a_model_that_answered_first():
    assert "no live python stub of model 'add_sub'" in judge_kill(killed(stub=None)).detail
    early = judge_kill(killed(before=(ok(0.0), failed(0.1, "boom"))))
    assert (
        not early.passed and early.detail == "not killed: before anything was broken, a request failed: boom"
    )
    assert baseline_problem((ok(0.0),)) == f"1 request(s) answered within {2 * DEADLINE_S:g} s"
    assert baseline_problem(BEFORE) is None


def test_a_server_that_does_not_answer_readiness_is_said_so():
    result = judge_kill(killed(ready_answered=False))
    assert "did not answer whether the model is ready" in result.detail and not result.passed


# --- a BLS model's callees ---------------------------------------------------------------------------------
CALLEES = ("add_sub", "add_sub_2")
NOT_READY = "model 'add_sub': Failed for execute the inference request. Model 'add_sub' is not ready."


def outage(**given) -> OutageOutcome:
    fields = dict(
        model="bls_sync",
        callees=CALLEES,
        before=BEFORE,
        unload_error="",
        during=(failed(1.0, NOT_READY, 0.01), failed(1.1, NOT_READY, 0.02)),
        load_error="",
        load_seconds=1.4,
        after=(failed(3.0, NOT_READY, 0.01), ok(3.2)),
        loaded_at=3.0,
    )
    return OutageOutcome(**{**fields, **given})


def test_a_bls_model_whose_callees_are_away_fails_in_time_naming_them_and_answers_once_they_are_back():
    gone, back = judge_outage(outage()), judge_return(outage())
    assert gone.name == "chaos: bls_sync with add_sub, add_sub_2 unloaded" and gone.passed
    assert "2 of 2 requests failed, each within 0.02 s; the first: model 'add_sub'" in gone.detail
    assert "Every error names the model that is missing." in gone.detail
    assert back.name == "chaos: bls_sync with add_sub, add_sub_2 loaded again" and back.passed
    assert "loaded add_sub, add_sub_2 again (1.4 s): 'bls_sync' answered correctly again 0.21 s later" in (
        back.detail
    )
    assert "(1 request(s) failed before)" in back.detail


@pytest.mark.parametrize(
    ("during", "why"),
    [
        ((Answer(1.0, DEADLINE_S, "no answer within 5 s", hung=True),), "must not wait on a model"),
        ((failed(1.0, "internal error", 0.01),), "does not name the model that is missing"),
        ((ok(1.0), ok(1.1)), "says 'bls_sync' calls add_sub, add_sub_2, but it answered without them"),
        ((Answer(1.0, 0.01, "wrong answer: x", wrong=True),), "outputs reference.py does not compute"),
    ],
    ids=["hung", "unnamed", "never-failed", "wrong"],
)
def test_a_bls_model_that_hangs_answers_wrong_or_blames_nobody_while_its_callees_are_away_fails(during, why):
    result = judge_outage(outage(during=during))
    assert not result.passed and why in result.detail


def test_a_bls_model_that_never_answers_again_or_callees_that_cannot_move_fail_their_step():
    never = judge_return(outage(after=(failed(3.0, NOT_READY), failed(4.0, NOT_READY))))
    assert not never.passed and f"answered no request correctly within 10 s; the last: {NOT_READY}" in (
        never.detail
    )
    refused = outage(unload_error="explicit model load / unload is not allowed", load_error=None)
    assert "could not unload add_sub, add_sub_2: explicit model" in judge_outage(refused).detail
    assert judge_return(refused).detail == "not run: the callees were not unloaded"
    assert "could not load" in judge_return(outage(load_error="no such model")).detail


# --- what is broken, in which order -------------------------------------------------------------------------
def test_bls_models_are_those_that_call_others_except_ensembles_and_callers_are_killed_first():
    models = [
        ModelEntry("add_sub", Path("a")),
        ModelEntry("bls_sync", Path("b"), pattern="bls", calls=CALLEES),
        ModelEntry("ensemble", Path("e"), pattern="ensemble", calls=("add_sub",)),
        ModelEntry("add_sub_2", Path("c")),
    ]
    assert bls_callees(models) == [("bls_sync", CALLEES)]
    assert kill_order(["add_sub", "bls_sync", "add_sub_2"], models) == ["bls_sync", "add_sub", "add_sub_2"]


def test_failures_are_counted_with_their_longest_wait_and_first_error():
    assert failures_text([ok(0), failed(1, "a", 0.5), failed(2, "b.", 0.7)]) == (
        "2 of 3 requests failed, each within 0.70 s; the first: a."
    )


# --- a flow of requests -------------------------------------------------------------------------------------
def test_a_flow_sends_until_it_is_stopped_also_when_the_run_breaks_off():
    seeds: list[int] = []

    def send(seed: int) -> Answer:
        seeds.append(seed)
        return ok(time.monotonic())

    flow = Flow(send)
    with pytest.raises(KeyboardInterrupt), flowing([flow]):
        flow.wait(lambda answers: len(answers) >= 3, timeout=5)
        raise KeyboardInterrupt
    sent = len(seeds)
    time.sleep(0.1)
    assert sent >= 3 and len(seeds) == sent and seeds == list(range(sent))
    assert len(flow.since(0.0)) == sent and flow.since(time.monotonic()) == ()


# --- the real thing -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tbgen_test_chaos_names_the_killed_stubs_and_the_bls_callees_steps_and_leaves_nothing(
    tmp_path, server_or_skip
):
    project = new_project(tmp_path, "python-backend", "pattern=bls")
    started = time.monotonic()
    run = run_tbgen("test", str(project), "--no-unit", "--chaos", timeout=180)
    seconds = time.monotonic() - started
    output = run.stdout
    results = check_results(output)
    assert run.returncode == 1, output[-4000:] + run.stderr[-2000:]
    assert "Traceback" not in output + run.stderr
    # the BLS model's callees away and back: errors that name them, then correct answers again
    assert results["chaos: bls_sync with add_sub, add_sub_2 unloaded"] == "pass"
    assert results["chaos: bls_sync with add_sub, add_sub_2 loaded again"] == "pass"
    assert "Model 'add_sub" in output and "is not ready" in output
    # a stub of each python model killed: named, the failed requests counted, the 2.51 READY claim said
    for model in ("bls_sync", "add_sub", "add_sub_2"):
        assert results[f"chaos: stub killed {model}"] == "FAIL", output[-4000:]
        assert f"killed the python stub of instance {model}_0_0" in output
        assert f"the first: Stub process '{model}_0_0' is not healthy." in output
    assert "still claimed the model READY (and itself ready) all the while" in output and ISSUE_8604 in output
    # every check before the chaos passed, and no stub death was reported twice
    assert all(v == "pass" for k, v in results.items() if not k.startswith("chaos: ")), results
    assert not any(k.startswith("python stub") for k in results)
    assert "killed after 2 s of its shutdown" in output
    assert triton_processes_of(project) == [], triton_processes_of(project)
    print(f"tbgen test --chaos: {seconds:.1f} s", file=sys.stderr)
