"""The C++ templates are one family: the pieces they share live once, in templates/_shared/.

Each family member reaches them through its own templates/ folder (the second directory of cookiecutter's
Jinja loader), whose entries are relative links into _shared/; plain cookiecutter, `tbgen new` and the wheel
(which stores the files the links point to) render the same projects (tests/scaffold, tests/packaging)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import TEMPLATES

from triton_backend_gen.scaffold import list_templates

SHARED = TEMPLATES / "_shared"
FAMILY = ["cpp-backend", "decoupled-backend"]
# The templates' Jinja extension, a Python module: linked from each template's root (where cookiecutter
# imports it) rather than from its templates/ folder.
EXTENSION = "local_extensions.py"


def test_the_shared_folder_is_not_a_template():
    assert not (SHARED / "cookiecutter.json").exists()
    assert "_shared" not in {template.name for template in list_templates()}


@pytest.mark.parametrize("template", FAMILY)
def test_each_member_links_every_shared_piece(template):
    folder = TEMPLATES / template / "templates"
    links = sorted(folder.iterdir())
    assert [link.name for link in links] == sorted(p.name for p in SHARED.iterdir() if p.name != EXTENSION)
    for link in links:
        assert link.is_symlink() and os.readlink(link) == f"../../_shared/{link.name}", link
        assert link.resolve() == (SHARED / link.name).resolve()


@pytest.mark.parametrize("template", [template.name for template in list_templates()])
def test_each_template_links_the_jinja_extension(template):
    link = TEMPLATES / template / EXTENSION
    assert link.is_symlink() and os.readlink(link) == f"../_shared/{EXTENSION}"
    spec = json.loads((TEMPLATES / template / "cookiecutter.json").read_text())
    assert spec["_extensions"] == ["local_extensions.TbgenExtension"]


@pytest.mark.parametrize(
    "relative",
    [".dockerignore", ".gitignore", "src/libtriton_my_backend.ldscript", "third_party/README.md"],
)
def test_the_shared_files_render_alike(render_template, relative):
    cpp = render_template("cpp-backend", project_name="cpp")
    decoupled = render_template("decoupled-backend", project_name="decoupled", backend_name="my_backend")
    assert (cpp / relative.replace("my_backend", "cpp")).read_text() == (decoupled / relative).read_text()


@pytest.mark.parametrize("template", FAMILY)
def test_both_sources_use_the_shared_backend_api(render_template, template):
    project = render_template(template)
    source = (project / "src" / "my_backend.cc").read_text()
    # one definition of each entry point and of the shared helpers, from _shared/
    for name in (
        "TRITONBACKEND_Initialize(",
        "TRITONBACKEND_ModelInstanceExecute(",
        "ValidateTensors(",
        "NewPerRequest(",
        "class ModelState : public BackendModel",
    ):
        assert source.count(f"\n{name}") == 1, name
    # the error contract: responses (or response factories) first, or the error back to Triton
    create = (
        "TRITONBACKEND_ResponseFactoryNew" if template == "decoupled-backend" else "TRITONBACKEND_ResponseNew"
    )
    assert f"RETURN_IF_ERROR(NewPerRequest(\n      requests, request_count, {create}," in source
    assert "return reinterpret_cast<ModelInstanceState*>(vstate)->ProcessRequests(" in source
