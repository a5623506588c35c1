"""Where tbgen finds a tritonserver, in which order, and how it learns the server's version."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import runtime_support
from runtime_support import write_fake_server

from triton_backend_gen import discovery, versions
from triton_backend_gen.discovery import discover_servers, find_tritonserver
from triton_backend_gen.errors import ServerError

embedded_install = runtime_support.embedded_install  # the fixture


@pytest.fixture
def candidates(tmp_path, monkeypatch):
    """A fake server for each place tbgen looks, each reporting a different release's version."""
    fakes = {
        "explicit": write_fake_server(tmp_path / "explicit", versions.RELEASES[0].server_version),
        "env": write_fake_server(tmp_path / "env", versions.RELEASES[1].server_version),
        "path": write_fake_server(tmp_path / "path", versions.RELEASES[2].server_version),
        "default": write_fake_server(tmp_path / "opt" / "tritonserver", versions.RELEASES[3].server_version),
    }
    monkeypatch.setenv("TRITONSERVER", str(fakes["env"]))
    monkeypatch.setenv("PATH", str(fakes["path"].parent))
    monkeypatch.setattr(discovery, "DEFAULT_ROOT", tmp_path / "opt" / "tritonserver")
    return fakes


def test_explicit_server_comes_first(candidates):
    install = find_tritonserver(candidates["explicit"])
    assert (install.source, install.executable) == ("--server", candidates["explicit"].resolve())
    assert install.release == versions.RELEASES[0]


def test_then_the_environment_variable(candidates):
    install = find_tritonserver()
    assert (install.source, install.executable) == ("$TRITONSERVER", candidates["env"].resolve())


def test_then_path_then_opt_tritonserver(candidates, monkeypatch):
    monkeypatch.delenv("TRITONSERVER")
    install = find_tritonserver()
    assert (install.source, install.executable) == ("PATH", candidates["path"].resolve())
    assert install.version == versions.RELEASES[2].server_version

    monkeypatch.setenv("PATH", str(candidates["explicit"].parent.parent))  # no tritonserver directly on it
    install = find_tritonserver()
    assert (install.source, install.executable) == (
        str(discovery.DEFAULT_ROOT),
        candidates["default"].resolve(),
    )


def test_then_the_embedded_wheel(candidates, monkeypatch, embedded_install):
    monkeypatch.delenv("TRITONSERVER")
    monkeypatch.setenv("PATH", os.devnull)
    monkeypatch.setattr(discovery, "DEFAULT_ROOT", candidates["default"].parent.parent / "absent")
    install = find_tritonserver()
    assert install.source == "embedded wheel"
    assert install.executable == embedded_install.executable


def test_discover_reports_every_candidate_in_order(candidates, embedded_install):
    found = discover_servers(candidates["explicit"])
    assert [source for source, _, _ in found] == [
        "--server",
        "$TRITONSERVER",
        "PATH",
        str(discovery.DEFAULT_ROOT),
        "embedded wheel",
    ]
    for source, install, note in found:
        assert install is not None, (source, note)
        assert install.version in note and str(install.executable) in note


def test_discover_says_why_a_candidate_is_missing(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(discovery, "DEFAULT_ROOT", tmp_path / "absent")
    notes = {source: (install, note) for source, install, note in discover_servers()}
    assert notes["$TRITONSERVER"] == (None, "not set")
    assert notes["PATH"][0] is None and "PATH" in notes["PATH"][1]
    assert notes[str(tmp_path / "absent")][0] is None


def test_an_explicit_server_that_is_unusable_is_an_error_not_a_fallback(tmp_path, candidates):
    with pytest.raises(ServerError, match="does not exist") as raised:
        find_tritonserver(tmp_path / "nowhere" / "tritonserver")
    assert "--server" in raised.value.message

    broken = tmp_path / "broken" / "bin" / "tritonserver"
    broken.parent.mkdir(parents=True)
    broken.write_text("#!/bin/sh\necho no table here\n")
    broken.chmod(0o755)
    with pytest.raises(ServerError, match="did not report its version"):
        find_tritonserver(broken)


def test_an_unusable_environment_variable_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONSERVER", str(tmp_path / "missing"))
    with pytest.raises(ServerError, match=r"\$TRITONSERVER"):
        find_tritonserver()


def test_no_server_anywhere_names_the_server_extra(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(discovery, "DEFAULT_ROOT", tmp_path / "absent")
    monkeypatch.setattr(discovery, "WHEEL_PACKAGE", "tbgen_no_such_package")
    with pytest.raises(ServerError) as raised:
        find_tritonserver()
    assert "pip install 'triton-backend-gen[server]'" in raised.value.hint
    assert "$TRITONSERVER: not set" in raised.value.message


def test_an_install_directory_is_accepted_for_its_bin_tritonserver(candidates):
    install = find_tritonserver(candidates["explicit"].parent.parent)
    assert install.executable == candidates["explicit"].resolve()
    assert install.root == candidates["explicit"].parent.parent.resolve()


def test_a_triton_version_file_answers_before_running_the_server(tmp_path):
    executable = write_fake_server(tmp_path / "ngc", "0.0.1")
    (tmp_path / "ngc" / "TRITON_VERSION").write_text(versions.RELEASES[5].server_version + "\n")
    assert discovery.install_from_executable(executable, "--server").release == versions.RELEASES[5]


def test_unknown_version_has_no_release(tmp_path):
    install = discovery.install_from_executable(write_fake_server(tmp_path / "x", "9.99.0"), "--server")
    assert install.version == "9.99.0" and install.release is None
    assert "does not know" in install.describe()


def test_ngc_layout_libraries_and_stub(tmp_path):
    root = tmp_path / "opt"
    executable = write_fake_server(root, versions.RELEASES[4].server_version)
    (root / "lib").mkdir()
    (root / "lib" / "libtritonserver.so").write_bytes(b"\x7fELF")
    stub = root / "backends" / "python" / discovery.STUB_NAME
    stub.parent.mkdir(parents=True)
    stub.write_bytes(b"\x7fELF...libpython3.10.so.1.0\0...")
    install = discovery.install_from_executable(executable, "/opt/tritonserver")
    assert install.library_dirs == (root.resolve() / "lib",)
    assert install.libtritonserver == root.resolve() / "lib" / "libtritonserver.so"
    assert dict(install.python_stubs) == {"3.10": stub.resolve()}


# --- the real embedded server -------------------------------------------------------------------------------
def test_embedded_wheel_layout(embedded_install):
    install = embedded_install
    assert install.source == "embedded wheel"
    assert os.access(install.executable, os.X_OK)
    assert (install.backends_dir / "python" / "libtriton_python.so").is_file()
    assert install.libtritonserver is not None and install.libtritonserver.name.startswith("libtritonserver")
    assert any(d.name == discovery.WHEEL_LIBS for d in install.library_dirs)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert install.python_stubs[here].is_file()
    # every per-version stub links the libpython of the directory it sits in
    for version, stub in install.python_stubs.items():
        assert discovery._linked_python(stub) == version


def test_embedded_server_version_is_known_and_cached(embedded_install):
    # The wheel pins a server that is in the release matrix; the server itself reports the version (the
    # running-server tests compare it with what the server answers over HTTP).
    assert embedded_install.release is not None
    assert embedded_install.release.server_version == embedded_install.version
    before = discovery._probed_version.cache_info().hits
    again = discovery.install_from_executable(embedded_install.executable, "--server")
    assert again.version == embedded_install.version
    assert discovery._probed_version.cache_info().hits == before + 1


def test_finding_the_wheel_does_not_import_pytriton(embedded_install):
    code = (
        "import sys; from triton_backend_gen.discovery import _wheel_executable; "
        "assert _wheel_executable(); print('pytriton' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
