"""Unit tests of the stand-in image's recipe: mirror parsing and the rebuild hash. No Docker engine needed."""

from __future__ import annotations

from pathlib import Path

import pytest
import standin

DEB822 = """\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""

ONE_LINE = """\
# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
http://one.example/debian bookworm main
deb http://one.example/debian-security bookworm-security main
"""


def test_deb822_picks_the_stanza_listing_the_suite() -> None:
    assert standin.mirror_from_deb822(DEB822) == "http://mirror.example/debian"
    assert standin.mirror_from_deb822(DEB822, "bookworm-security") == "http://mirror.example/debian-security"
    assert standin.mirror_from_deb822(DEB822, "trixie") is None


def test_deb822_skips_disabled_and_source_stanzas() -> None:
    text = (
        "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n"
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: mirror+file:/etc/apt/mirrors.txt\n  http://on.example/debian\nSuites: bookworm\n"
    )
    assert standin.mirror_from_deb822(text) == "http://on.example/debian"


def test_one_line_format_ignores_comments_sources_and_options() -> None:
    assert standin.mirror_from_one_line(ONE_LINE) == "http://one.example/debian"
    assert standin.mirror_from_one_line(ONE_LINE, "trixie") is None


def test_debian_mirror_reads_an_apt_directory(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    assert standin.debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text(ONE_LINE)  # the one-line file is read first, as apt lists it first
    assert standin.debian_mirror(tmp_path) == "http://one.example/debian"


def test_debian_mirror_without_the_suite_says_what_to_add(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://one.example/debian trixie main\n")
    with pytest.raises(RuntimeError, match="deb <mirror> bookworm main"):
        standin.debian_mirror(tmp_path)


def test_hash_follows_every_recipe_input() -> None:
    base = standin.recipe_hash("0.7.0", "pytriton/x,sha256=a,1\n")
    assert base == standin.recipe_hash("0.7.0", "pytriton/x,sha256=a,1\n")
    changed = [
        standin.recipe_hash("0.7.1", "pytriton/x,sha256=a,1\n"),
        standin.recipe_hash("0.7.0", "pytriton/x,sha256=b,1\n"),
        standin.recipe_hash("0.7.0", "pytriton/x,sha256=a,1\n", packages=(*standin.PACKAGES, "curl")),
        standin.recipe_hash("0.7.0", "pytriton/x,sha256=a,1\n", suite="trixie"),
        standin.recipe_hash("0.7.0", "pytriton/x,sha256=a,1\n", recipe_version=standin.RECIPE_VERSION + 1),
    ]
    assert base not in changed
    assert len(set(changed)) == len(changed)
