"""Sanitizer builds: `tbgen build/test --sanitize` (flags, runtimes preloaded into the server, reports read
from the server log), and the cpp-backend template running under ASan+UBSan with no report."""

from __future__ import annotations

import re
import shutil

import pytest
from conftest import check_results, new_project, triton_sources_or_skip
from conftest import run_tbgen as tbgen

from triton_backend_gen.errors import UsageError
from triton_backend_gen.runtime.sanitizers import (
    leak_check_library,
    leak_reports,
    parse_ldd_runtimes,
    sanitizer_environment,
    sanitizer_reports,
)
from triton_backend_gen.toolchain.build import parse_sanitizers, sanitizer_defines


def test_sanitizer_lists_are_parsed_and_unknown_names_refused():
    assert parse_sanitizers("address, undefined,address") == ("address", "undefined")
    assert parse_sanitizers(None) == () and parse_sanitizers("") == ()
    with pytest.raises(UsageError, match="thread"):
        parse_sanitizers("address,thread")


def test_sanitizer_defines_instrument_compiles_and_links():
    defines = sanitizer_defines(("address", "undefined"))
    assert "-fsanitize=address,undefined" in defines["CMAKE_CXX_FLAGS"]
    assert "-fno-omit-frame-pointer" in defines["CMAKE_CXX_FLAGS"]
    assert defines["CMAKE_SHARED_LINKER_FLAGS"] == "-fsanitize=address,undefined"
    assert sanitizer_defines(()) == {}


def test_runtimes_come_from_ldd_with_asan_first():
    output = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n"
        "\tlibubsan.so.1 => /lib/x86_64-linux-gnu/libubsan.so.1 (0x00007f0b)\n"
        "\tlibtritonserver.so => not found\n"
        "\tlibasan.so.8 => /lib/x86_64-linux-gnu/libasan.so.8 (0x00007f0a)\n"
    )
    runtimes = parse_ldd_runtimes(output)
    assert [p.name for p in runtimes] == ["libasan.so.8", "libubsan.so.1"]
    env = sanitizer_environment(runtimes)
    assert (
        env["LD_PRELOAD"].split(":")[0].endswith("libasan.so.8")
        and "leak_check_at_exit=0" in env["ASAN_OPTIONS"]
    )
    assert (
        parse_ldd_runtimes("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n") == () and sanitizer_environment(()) == {}
    )


def test_reports_are_found_in_a_server_log():
    log = (
        'I1202 20:38:21.322664 26739 http_server.cc:4713] "Started HTTPService at 127.0.0.1:44021"\n'
        "/p/src/p.cc:50:26: runtime error: load of misaligned address 0x6190 for type 'const Element'\n"
        "    #0 0x7f72 in AddSub(float const*) /p/src/p.cc:50\n"
        "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020\n"
    )
    reports = sanitizer_reports(log, context=1)
    assert len(reports) == 2
    assert reports[0].startswith("/p/src/p.cc:50:26: runtime error") and "#0" in reports[0]
    assert "heap-buffer-overflow" in reports[1]
    assert sanitizer_reports("E1202 something failed\nruntime errors are fine to mention\n") == []


def test_leak_reports_keep_the_leaks_the_backend_allocated():
    log = (
        "==1==ERROR: LeakSanitizer: detected memory leaks\n\n"
        "Direct leak of 64 byte(s) in 1 object(s) allocated from:\n"
        "    #0 0x7f in operator new[](unsigned long) asan_new_delete.cpp:98\n"
        "    #1 0x7f in triton::backend::my_backend::Compute(...) ../../src/compute.cc:41\n\n"
        "Direct leak of 32 byte(s) in 1 object(s) allocated from:\n"
        "    #0 0x7f in malloc asan_malloc_linux.cpp:69\n"
        "    #1 0x7f in triton::core::InferenceServer::Init() (/opt/lib/libtritonserver.so+0x1)\n\n"
        "Indirect leak of 16 byte(s) in 1 object(s) allocated from:\n"
        "    #1 0x7f  (/p/build/install/backends/my_backend/libtriton_my_backend.so+0x2f1)\n\n"
        "SUMMARY: AddressSanitizer: 112 byte(s) leaked in 3 allocation(s).\n"
    )
    found = leak_reports(log, "my_backend")
    assert [block.splitlines()[0] for block in found] == [
        "Direct leak of 64 byte(s) in 1 object(s) allocated from:",
        "Indirect leak of 16 byte(s) in 1 object(s) allocated from:",
    ]
    assert sanitizer_reports(log) == []  # a leak is the leak check's to judge, the backend's only


def test_the_leak_check_library_compiles_warning_free(tmp_path):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    library = leak_check_library(tmp_path)
    assert library is not None and library.is_file()
    assert leak_check_library(tmp_path) == library  # built once: the source's hash is in its name


def test_sanitize_is_refused_for_python_projects(tmp_path):
    project = new_project(tmp_path, "python-backend")
    result = tbgen("build", str(project), "--sanitize", "address")
    assert result.returncode == 2 and "python project" in result.stderr


@pytest.mark.cpp
@pytest.mark.slow
def test_cpp_backend_passes_the_smoke_suite_under_asan_and_ubsan(tmp_path, compiler_cache, server_or_skip):
    """Zero reports for the template; then a planted bug in the user's Compute is reported and fails the
    run."""
    triton_sources_or_skip("r24.10")
    if shutil.which("gcc") is None:
        pytest.skip("no gcc: the sanitizer runtimes come with it")
    project = new_project(tmp_path, "cpp-backend")
    clean = tbgen("test", str(project), "--sanitize", "address,undefined", "--fuzz", "50")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "sanitizer reports" in clean.stdout and "libasan" in clean.stdout
    assert check_results(clean.stdout)["leak check (LeakSanitizer)"] == "pass", clean.stdout
    needed = (project / "build/sanitize/tbgen-build.log").read_text()
    assert "-fsanitize=address,undefined" in needed

    source = project / "src" / "compute.cc"
    text = source.read_text()
    marker = "  for (size_t i = 0; i < batch_size * a.row_size; ++i) {"
    assert marker in text
    # A shift by more than the width of int: undefined behaviour that UBSan reports and execution survives.
    # And 64 bytes lost on every call: LeakSanitizer's check in the running server names where they came from.
    planted = (
        "  volatile int width = 40 + static_cast<int>(batch_size % 2);\n"
        "  sum[0] = static_cast<float>(1 << width);\n"
        "  static char* volatile lost = nullptr;\n"
        "  lost = new char[64];\n"
        "  lost[0] = 1;\n"
    )
    source.write_text(text.replace(marker, planted + marker, 1))
    # The unit tests, built with the sanitizers too, stop the run: LeakSanitizer fails their process at exit.
    units = tbgen("test", str(project), "--sanitize", "address,undefined")
    assert units.returncode == 1 and "LeakSanitizer: detected memory leaks" in units.stdout, units.stdout
    assert "no server started" in units.stdout, units.stdout
    buggy = tbgen("test", str(project), "--sanitize", "address,undefined", "--no-unit")
    assert buggy.returncode == 1, buggy.stdout + buggy.stderr
    assert "runtime error" in buggy.stdout and "shift exponent" in buggy.stdout
    results = check_results(buggy.stdout)
    assert results["leak check (LeakSanitizer)"] == "FAIL", buggy.stdout
    assert re.search(r"Direct leak of \d+ byte\(s\) in \d+ object\(s\)", buggy.stdout), buggy.stdout
    frame = r"in triton::backend::\w+::Compute\([^#]*src/compute\.cc:\d+"  # the planted line, through a wrap
    assert re.search(frame, buggy.stdout), buggy.stdout
