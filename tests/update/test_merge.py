"""The 3-way plan of `tbgen update` and its all-or-nothing application, on small trees."""

import os
import signal
import threading
from pathlib import Path

import pytest
from conftest import snapshot

from triton_backend_gen.errors import ScaffoldError
from triton_backend_gen.scaffold import update
from triton_backend_gen.scaffold.record import GeneratedFile, Recipe, Record, read_record
from triton_backend_gen.scaffold.update import (
    ADDED,
    CONFLICT,
    DELETED_BY_YOU,
    MERGED,
    NO_LONGER_GENERATED,
    REPLACED,
    Labels,
    apply_update,
    plan_update,
)

LABELS = Labels("yours", "generated", "tbgen update")
LINES = "".join(f"line {i}\n" for i in range(1, 21))


def files(**texts: str) -> dict[str, GeneratedFile]:
    return {
        name.replace("__", "/").replace("_", "."): GeneratedFile(text.encode())
        for name, text in texts.items()
    }


def write(root: Path, **texts: str) -> None:
    for relative, file in files(**texts).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(file.data)


def actions(changes) -> dict[str, str]:
    return {c.path: c.action for c in changes}


def test_each_case_of_the_plan(tmp_path):
    base = files(
        same_txt="a\n",
        untouched_txt="old\n",
        edited_txt=LINES,
        clash_txt="x\n",
        deleted_txt="d\n",
        dropped_txt="gone\n",
        dropped__edited_txt="gone\n",
        yours__only_txt="kept\n",
    )
    new = files(
        same_txt="a\n",
        untouched_txt="new\n",
        edited_txt=LINES.replace("line 18", "line eighteen"),
        clash_txt="theirs\n",
        deleted_txt="d2\n",
        added_txt="hello\n",
        yours__only_txt="kept\n",
    )
    write(
        tmp_path,
        same_txt="a\n",
        untouched_txt="old\n",
        edited_txt=LINES.replace("line 2\n", "line two\n"),
        clash_txt="mine\n",
        dropped_txt="gone\n",
        dropped__edited_txt="changed\n",
        yours__only_txt="mine too\n",
    )
    changes = plan_update(tmp_path, base, new, LABELS)
    assert actions(changes) == {
        "untouched.txt": REPLACED,
        "edited.txt": MERGED,
        "clash.txt": CONFLICT,
        "deleted.txt": DELETED_BY_YOU,
        "dropped.txt": NO_LONGER_GENERATED,
        "added.txt": ADDED,
    }
    merged = next(c for c in changes if c.path == "edited.txt").result.data.decode()
    assert "line two\n" in merged and "line eighteen\n" in merged and "<<<<<<<" not in merged
    clash = next(c for c in changes if c.path == "clash.txt").result.data.decode()
    assert clash == "<<<<<<< yours\nmine\n=======\ntheirs\n>>>>>>> tbgen update\n"


def test_a_file_of_yours_where_the_template_adds_one_is_merged_with_an_empty_base(tmp_path):
    write(tmp_path, notes_md="# mine\n")
    changes = plan_update(tmp_path, {}, files(notes_md="# tbgen's\n"), LABELS)
    assert actions(changes) == {"notes.md": CONFLICT}
    assert "# mine" in changes[0].result.data.decode() and "# tbgen's" in changes[0].result.data.decode()


def test_a_binary_conflict_keeps_yours_and_says_so(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"\0mine")
    base, new = {"model.pt": GeneratedFile(b"\0base")}, {"model.pt": GeneratedFile(b"\0new")}
    [change] = plan_update(tmp_path, base, new, LABELS)
    assert change.action == CONFLICT and change.result is None and "not text" in change.note


def record_of(tmp_path: Path, **texts: str) -> Record:
    return Record(
        Recipe("python-backend", "0.2.0", {"project_name": "p", "triton_version": "26.02"}), files(**texts)
    )


def test_apply_writes_every_change_and_the_record(tmp_path):
    write(tmp_path, a_txt="old\n")
    changes = plan_update(tmp_path, files(a_txt="old\n"), files(a_txt="new\n", sub__b_txt="b\n"), LABELS)
    apply_update(tmp_path, changes, record_of(tmp_path, a_txt="new\n", sub__b_txt="b\n"))
    assert (tmp_path / "a.txt").read_text() == "new\n" and (tmp_path / "sub" / "b.txt").read_text() == "b\n"
    assert read_record(tmp_path).files == files(a_txt="new\n", sub__b_txt="b\n")


def test_a_failure_half_way_puts_everything_back(tmp_path, monkeypatch):
    write(tmp_path, a_txt="old\n", z__c_txt="old\n")
    before = snapshot(tmp_path)
    changes = plan_update(
        tmp_path,
        files(a_txt="old\n", z__c_txt="old\n"),
        files(a_txt="new\n", m__b_txt="b\n", z__c_txt="new\n"),
        LABELS,
    )
    real = update.replace_file

    def disk_full_at_the_last(path, file):
        if path.name == "c.txt":
            raise OSError(28, "No space left on device", str(path))
        real(path, file)

    monkeypatch.setattr(update, "replace_file", disk_full_at_the_last)
    with pytest.raises(ScaffoldError) as err:
        apply_update(tmp_path, changes, record_of(tmp_path))
    assert "No space left" in err.value.message and "as it was" in err.value.message
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("after", [0, 1, 2])
def test_a_signal_while_writing_puts_everything_back_then_arrives(tmp_path, monkeypatch, after):
    """SIGINT after 0, 1 or 2 files are written: held back until the project is as it was, then delivered;
    also when another thread is alive for the kernel to hand the signal to."""
    write(tmp_path, a_txt="old\n", b_txt="old\n")
    before = snapshot(tmp_path)
    changes = plan_update(
        tmp_path, files(a_txt="old\n", b_txt="old\n"), files(a_txt="new\n", b_txt="new\n"), LABELS
    )
    real, written = update.replace_file, []

    def write_then_signal(path, file):
        if len(written) == after:
            os.kill(os.getpid(), signal.SIGINT)
        written.append(path)
        real(path, file)

    monkeypatch.setattr(update, "replace_file", write_then_signal)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            apply_update(tmp_path, changes, record_of(tmp_path))
    finally:
        stop.set()
    assert snapshot(tmp_path) == before
