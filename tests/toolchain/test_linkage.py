"""Where a backend's shared objects resolve (toolchain.linkage, symbols.parse_ldd): the decisions, pure. The
real runs (ldd in the stand-in image, tbgen package carrying what it lacks) are in
tests/containers/test_docker_path.py."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from triton_backend_gen import docker_engine as engine
from triton_backend_gen.toolchain import linkage, symbols
from triton_backend_gen.toolchain.symbols import Resolution

LDD_IN_IMAGE = """\tlinux-vdso.so.1 (0x00007ffc5d1f2000)
\tlibtritonserver.so => /opt/tritonserver/lib/libtritonserver.so (0x00007f0c2a000000)
\tlibspdlog.so.1.10 => not found
\tlibfmt.so.9 => not found
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f0c29c00000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0c2bd3c000)
"""
VERSION_ERROR = (
    "/opt/tritonserver/backends/x/libtriton_x.so: /lib/x86_64-linux-gnu/libstdc++.so.6: version "
    "`GLIBCXX_3.4.32' not found (required by /opt/tritonserver/backends/x/libtriton_x.so)"
)
HOST = Resolution(
    {
        "libspdlog.so.1.10": "/lib/x86_64-linux-gnu/libspdlog.so.1.10",
        "libfmt.so.9": "/lib/x86_64-linux-gnu/libfmt.so.9",
        "libstdc++.so.6": "/lib/x86_64-linux-gnu/libstdc++.so.6",
    },
    ("libtritonserver.so",),
)


def test_ldd_output_is_read_into_found_missing_and_version_errors():
    resolution = symbols.parse_ldd(LDD_IN_IMAGE + VERSION_ERROR + "\n")
    assert resolution.found == {
        "libtritonserver.so": "/opt/tritonserver/lib/libtritonserver.so",
        "libstdc++.so.6": "/lib/x86_64-linux-gnu/libstdc++.so.6",
    }
    assert resolution.missing == ("libspdlog.so.1.10", "libfmt.so.9")
    assert resolution.version_errors == (VERSION_ERROR,)


def test_what_needs_a_library_comes_from_the_needed_graph_the_backend_first():
    graph = {"libtriton_x.so": ["libspdlog.so.1.10", "libfmt.so.9"], "libspdlog.so.1.10": ["libfmt.so.9"]}
    assert symbols.needers_of("libfmt.so.9", graph, "libtriton_x.so") == [
        "libtriton_x.so",
        "libspdlog.so.1.10",
    ]
    assert (
        symbols.needed_by("libfmt.so.9", graph, "libtriton_x.so")
        == "libtriton_x.so and libspdlog.so.1.10 need"
    )
    assert symbols.needed_by("libz.so.1", {}, "libtriton_x.so") == "libtriton_x.so needs"


def test_missing_libraries_are_named_with_what_needs_them_and_the_fix():
    graph = {"libtriton_x.so": ["libspdlog.so.1.10"], "libspdlog.so.1.10": ["libfmt.so.9"]}
    in_image = symbols.parse_ldd(LDD_IN_IMAGE + "\tlibmine.so.1 => not found\n")
    findings = linkage.image_findings(
        "libtriton_x.so", "img:1", in_image, HOST, graph, {"libfmt.so.9": "libfmt9"}
    )
    messages = [f.message for f in findings]
    assert all(f.severity == "error" for f in findings)
    assert messages[0].startswith(
        "libspdlog.so.1.10, which libtriton_x.so needs, is not in img:1: `tbgen package` "
        "carries it beside the backend"
    )
    assert "apt-get install" not in messages[0]  # dpkg did not know it
    assert messages[1].startswith("libfmt.so.9, which libspdlog.so.1.10 needs, is not in img:1")
    assert messages[1].endswith("or install it in the image (apt-get install libfmt9)")
    assert "nor found on this machine" in messages[2]


def test_symbol_versions_the_image_lacks_are_errors_too():
    in_image = Resolution({}, (), (VERSION_ERROR,))
    (finding,) = linkage.image_findings("libtriton_x.so", "img:1", in_image, HOST, {}, {})
    assert "GLIBCXX_3.4.32" in finding.message and "tbgen build --docker" in finding.message


def test_locally_missing_libraries_name_the_fix():
    graph = {"libtriton_x.so": ["libmine.so.1"]}
    (finding,) = symbols.missing_library_findings(["libmine.so.1"], "libtriton_x.so", graph)
    assert finding.message.startswith("ldd cannot find libmine.so.1, which libtriton_x.so needs: install it")
    assert "`tbgen add library` and --path naming the prefix" in finding.message


def test_each_round_carries_what_the_image_lacks_and_this_machine_has():
    new, unresolvable = linkage.carry_round(["libspdlog.so.1.10", "libfmt.so.9"], HOST, {})
    assert new == {
        "libspdlog.so.1.10": HOST.found["libspdlog.so.1.10"],
        "libfmt.so.9": HOST.found["libfmt.so.9"],
    }
    assert unresolvable == []
    # Not on this machine, or carried already and still not loadable: nothing more to do.
    new, unresolvable = linkage.carry_round(
        ["libtritonserver.so", "libfmt.so.9"], HOST, {"libfmt.so.9": "/x"}
    )
    assert (new, unresolvable) == ({}, ["libtritonserver.so", "libfmt.so.9"])


def test_dpkg_search_output_and_the_names_a_merged_usr_library_has():
    output = "libfmt9:amd64: /usr/lib/x86_64-linux-gnu/libfmt.so.9.1.0\n"
    assert linkage.parse_dpkg_search(output) == "libfmt9"
    assert linkage.parse_dpkg_search("dpkg-query: no path found matching pattern /x\n") is None
    candidates = linkage.dpkg_candidates("/lib/x86_64-linux-gnu/libnot-here.so.1")
    assert "/lib/x86_64-linux-gnu/libnot-here.so.1" in candidates
    assert "/usr/lib/x86_64-linux-gnu/libnot-here.so.1" in candidates


def test_ldd_runs_in_the_image_as_the_server_loads_the_backend(tmp_path):
    spec = linkage.ldd_spec("img:1", tmp_path, "x", "libtriton_x.so", Path("/p"), user="1000:1000")
    assert spec["volumes"] == {
        str(tmp_path.resolve()): {"bind": "/opt/tritonserver/backends/x", "mode": "ro"}
    }
    assert spec["network_mode"] == "none" and spec["user"] == "1000:1000"
    assert spec["labels"][engine.ROLE_LABEL] == engine.ROLE_CHECK and spec["labels"][engine.LABEL] == "1"
    assert spec["labels"][engine.PROJECT_LABEL] == "/p" and engine.OWNER_LABEL in spec["labels"]
    script = spec["command"][2]
    assert script == linkage.ldd_script(PurePosixPath("/opt/tritonserver/backends/x"), "libtriton_x.so")
    library_path = "/opt/tritonserver/lib:/opt/tritonserver/backends/x${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    assert f'export LD_LIBRARY_PATH="{library_path}"' in script
    assert script.endswith("exec ldd /opt/tritonserver/backends/x/libtriton_x.so")
