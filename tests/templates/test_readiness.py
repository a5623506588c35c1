"""Readiness by release: an instance whose code cannot recover stops serving, and says so where the release
asks.

Every generated backend keeps the instance's health: once the user's code raises Unrecoverable (C++: throws
it; a framework backend also when its library fails beyond repair) the requests at hand and every later one
get the reason (UNAVAILABLE). Where the release's Triton asks, the instance also reports not ready: C++
backends define TRITONBACKEND_ModelInstanceReady from 25.12 (core asks it on every readiness probe), Python
models is_ready() from 26.03 (python_backend asks it). The templates decide by release at render time
(local_extensions.release_has, a copy of the release matrix's FEATURES, compared here).

The C++ side is built and served in tests/templates/test_cpp_backend.py (the default project: exported
from r25.12, absent at 24.10, and asked after each execution by a probe linked in, as a newer core would);
here the Python side runs in this process: model.py imported as the stub imports it, with the project's
stand-in for triton_python_backend_utils (tests/), its execute() fed requests built from reference.py.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest
from conftest import TEMPLATES
from google.protobuf import json_format

from triton_backend_gen import versions
from triton_backend_gen.model_config import load_model_config


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_templates_decide_by_the_release_matrix():
    extensions = load_module(TEMPLATES / "_shared" / "local_extensions.py", "tbgen_local_extensions")
    assert extensions.FEATURES_SINCE == {
        name: versions.FEATURES[name].since for name in extensions.FEATURES_SINCE
    }
    for release in versions.RELEASES:
        for feature in extensions.FEATURES_SINCE:
            expected = release.has(feature)
            assert extensions.release_has(release.container, feature) == expected, (release, feature)
            assert extensions.release_has(release.branch, feature) == expected, (release, feature)


# Every kind of C++ backend (each has a ModelInstanceState of its own; a framework's is the batching one),
# each side of the release that brings the entry point.
CPP_KINDS = [
    ("cpp-backend", {}),
    ("cpp-backend", {"sequence": "direct", "dtype": "INT32"}),
    ("cpp-backend", {"pattern": "bls"}),
    ("decoupled-backend", {"language": "cpp"}),
    ("decoupled-backend", {"language": "cpp", "sequence": "oldest"}),
]


@pytest.mark.parametrize(
    ("template", "answers"), CPP_KINDS, ids=[" ".join([t, *map(str, a.values())]) for t, a in CPP_KINDS]
)
def test_cpp_backends_define_the_readiness_entry_point_from_the_release_that_asks_it(
    render_template, template, answers
):
    since = versions.resolve(versions.FEATURES["instance_ready"].since)
    before = versions.RELEASES[versions.RELEASES.index(since) - 1]
    for release in (before, since):
        name = "p" + release.container.replace(".", "")
        project = render_template(template, project_name=name, triton_version=release.container, **answers)
        source = (project / "src" / f"{name}.cc").read_text()
        defined = source.count("\nTRITONBACKEND_ModelInstanceReady(TRITONBACKEND_ModelInstance* instance)")
        assert defined == (1 if release.has("instance_ready") else 0), release.container
        assert "InstanceHealth health_{*this};" in source  # every release: the instance stops serving


# ---- Python models, in this process ------------------------------------------------------------------------


# The names a project's modules are imported under, as the python backend's stub imports them.
STUB_NAMES = ("model", "compute", "triton_python_backend_utils")


@pytest.fixture
def isolated_modules():
    """sys.path as it was, and none of a project's modules left under the stub's names (or a reference's),
    after a test imported them."""
    path = list(sys.path)
    yield
    for name in [n for n in sys.modules if n in STUB_NAMES or n.startswith("reference_")]:
        del sys.modules[name]
    sys.path[:] = path


# The user's function of each kind of model, wrapped in compute.py (the user's file) so that it raises
# Unrecoverable once the test sets POISONED: what a compute.py does when its device is lost.
POISON = """

_real_{name} = {name}


def {name}(*args):
    if POISONED:
        raise Unrecoverable("the device was lost")
    return _real_{name}(*args)


POISONED = False
"""


class Instance:
    """One instance of a rendered Python model: model.py imported as the stub imports it (its directory and
    the project's tests/, where the stand-in for triton_python_backend_utils is, on sys.path), initialized
    with the model's configuration as JSON."""

    def __init__(self, project: Path, model: str, function: str):
        version = project / "model_repository" / model / "1"
        compute_file = version / "compute.py"
        compute_file.write_text(compute_file.read_text() + POISON.format(name=function))
        sys.path[:0] = [str(project / "tests"), str(version)]
        for name in STUB_NAMES:
            sys.modules.pop(name, None)
        self.module = load_module(version / "model.py", "model")
        self.pb_utils = sys.modules["triton_python_backend_utils"]
        self.compute = sys.modules["compute"]
        self.reference = load_module(project / "reference.py", f"reference_{model}")
        config = load_model_config(project / "model_repository" / model / "config.pbtxt")
        as_json = json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))
        self.model = self.module.TritonPythonModel()
        self.model.initialize({"model_config": as_json, "model_name": model, "model_instance_name": "i_0"})

    def request(self, seed: int):
        batch = 1 if getattr(self.reference, "MAX_BATCH_SIZE", 0) > 0 else None
        inputs = self.reference.make_inputs(batch, seed=seed)
        tensors = [self.pb_utils.Tensor(name, array) for name, array in inputs.items() if array is not None]
        return self.pb_utils.InferenceRequest("m", inputs=tensors)

    def answers(self, seeds: list[int]) -> list:
        """The error (a TritonError, None for a success) each request of one execution got: execute()'s
        responses, or a decoupled request's final response through its sender."""
        requests = [self.request(seed) for seed in seeds]
        returned = self.model.execute(requests)
        if returned is not None:
            return [response.error() for response in returned]
        return [self._final(request.get_response_sender()).error() for request in requests]

    def _final(self, sender):
        """The response that came with the final flag (the flag alone: an empty response), waiting a moment
        for a stream on a worker thread."""
        deadline = time.monotonic() + 10
        while not any(flags & self.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL for _, flags in sender.sent):
            assert time.monotonic() < deadline, "no final flag"
            time.sleep(0.01)
        response, _ = sender.sent[-1]
        return response or self.pb_utils.InferenceResponse()


PYTHON_KINDS = [
    ("python-backend", {}, "add_sub", "compute"),
    ("python-backend", {"batching": "vectorized"}, "add_sub", "compute"),
    ("decoupled-backend", {"language": "python"}, "repeat_int32", "stream"),
    (
        "decoupled-backend",
        {
            "language": "python",
            "signature": {
                "inputs": [{"name": "X", "datatype": "INT32", "dims": [2]}],
                "outputs": [{"name": "Y", "datatype": "INT32", "dims": [2]}],
            },
        },
        "my-backend",
        "stream",
    ),
]


@pytest.mark.parametrize("release", ["24.10", "26.06"])
@pytest.mark.parametrize(
    ("template", "answers", "model", "function"),
    PYTHON_KINDS,
    ids=["per-request", "vectorized", "repeat", "stream"],
)
def test_a_python_model_that_cannot_recover_refuses_requests_and_is_not_ready(
    render_template, isolated_modules, template, answers, model, function, release
):
    """Until compute.py raises Unrecoverable the model answers and (26.03 and later) is_ready() is True; the
    requests that met it, and every later one, get the reason (UNAVAILABLE), without compute.py running
    again; is_ready() is then False. Before 26.03 model.py has no is_ready() (the python backend never asks)
    and refuses all the same."""
    project = render_template(template, triton_version=release, **answers)
    instance = Instance(project, model, function)
    asks = versions.resolve(release).has("python_is_ready")
    assert hasattr(instance.model, "is_ready") == asks
    assert instance.answers([0, 1]) == [None, None]
    assert not asks or instance.model.is_ready() is True

    instance.compute.POISONED = True
    failed = instance.answers([2, 3])
    instance.compute.POISONED = False  # healthy again: model.py must not call it anyway
    later = instance.answers([4])
    reason = f"{model}: this instance cannot serve requests: the device was lost"
    for error in [*failed, *later]:
        assert error is not None and error.message() == reason
        assert error.code() == instance.pb_utils.TritonError.UNAVAILABLE
    assert not asks or instance.model.is_ready() is False
    instance.model.finalize()
