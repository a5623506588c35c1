"""A project generated at r24.10, built, edited (compute code, an added source file, a second instance group)
and updated to r26.02: every edit is kept, everything release-specific says r26.02, and it builds and passes
`tbgen test` (the embedded 2.51 server loads backends of later releases: their backend API is the same
1.19)."""

import tomllib

import pytest
from conftest import (
    cmake_fits_or_skip,
    commit_all,
    new_project,
    replace_once,
    run_tbgen,
    triton_sources_or_skip,
)

from triton_backend_gen import versions

pytestmark = pytest.mark.slow

SECOND_GROUP = "\n# a second group of mine\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n"


def edit_cpp(project, source, header, extra, old, new):
    """Compute code calling a function of an added source file, listed in CMakeLists.txt."""
    (project / "src" / "extra.h").write_text(header)
    (project / "src" / "extra.cc").write_text(extra)
    text = source.read_text()
    first_include = text.index("#include")
    source.write_text(text[:first_include] + '#include "extra.h"\n' + text[first_include:])
    replace_once(source, old, new)
    replace_once(
        project / "CMakeLists.txt", f"SHARED src/{source.name})", f"SHARED src/{source.name} src/extra.cc)"
    )


CASES = {
    "cpp-backend": (
        "src/proj.cc",
        "float UserAdd(float a, float b);\n",
        '#include "extra.h"\n\nfloat\nUserAdd(float a, float b)\n{\n  return a + b;\n}\n',
        "sum[i] = a[i] + b[i];",
        "sum[i] = UserAdd(a[i], b[i]);  // mine",
    ),
    "decoupled-backend": (
        "src/proj.cc",
        "#include <cstdint>\nint32_t UserRepeat(int32_t value);\n",
        '#include "extra.h"\n\nint32_t\nUserRepeat(int32_t value)\n{\n  return value;\n}\n',
        "job.stream->Send(job.in[i],",
        "job.stream->Send(UserRepeat(job.in[i]),  // mine\n",
    ),
}


@pytest.mark.parametrize("template", ["cpp-backend", "decoupled-backend", "python-backend"])
def test_an_edited_project_moves_from_24_10_to_26_02_and_passes_tbgen_test(
    tmp_path, template, compiler_cache
):
    old, new = versions.resolve("24.10"), versions.resolve("26.02")
    project = new_project(tmp_path, template)  # 24.10
    cpp = template in CASES
    if cpp:
        for release in (old, new):
            triton_sources_or_skip(release.branch)
            cmake_fits_or_skip(release)
        built = run_tbgen("build", cwd=project)  # a build tree of the old release, reused after the update
        assert built.returncode == 0, built.stdout + built.stderr
        source, *rest = CASES[template]
        edit_cpp(project, project / source, *rest)
        edited = {project / source: "// mine", project / "CMakeLists.txt": "src/extra.cc)"}
    else:
        model = project / "model_repository" / "add_sub" / "1" / "model.py"
        replace_once(model, "OUTPUT0: in0 + in1,", "OUTPUT0: np.add(in0, in1),  # mine\n           ")
        (project / "Dockerfile").write_text((project / "Dockerfile").read_text() + "# my deployment notes\n")
        edited = {model: "np.add(in0, in1),  # mine", project / "Dockerfile": "# my deployment notes"}
    model_name = tomllib.loads((project / "tbgen.toml").read_text())["models"][0]["name"]
    config = project / "model_repository" / model_name / "config.pbtxt"
    config.write_text(config.read_text() + SECOND_GROUP)
    edited[config] = SECOND_GROUP
    commit_all(project)

    updated = run_tbgen("update", "--triton-version", "26.02", cwd=project)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    for path, text in edited.items():
        assert text in path.read_text(), f"{path.name} lost the edit {text!r}"
    assert tomllib.loads((project / "tbgen.toml").read_text())["project"]["triton_version"] == "26.02"
    assert f"tritonserver:{new.container}-py3" in (project / "Dockerfile").read_text()
    if cpp:
        cmake = (project / "CMakeLists.txt").read_text()
        assert cmake.count('_REPO_TAG "r26.02"') == 3 and '"r24.10"' not in cmake
        assert f"cmake_minimum_required(VERSION {new.min_cmake})" in cmake
    leftovers = [p for p in project.rglob("*") if p.suffix in (".rej", ".orig", ".tbgen-new")]
    assert leftovers == []

    if cpp:
        built = run_tbgen("build", cwd=project)
        assert built.returncode == 0, built.stdout + built.stderr
        assert "r26.02" in (project / "build" / "CMakeCache.txt").read_text()
    tested = run_tbgen("test", cwd=project)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert " 0 failed" in tested.stdout
