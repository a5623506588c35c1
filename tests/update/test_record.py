"""The generation record `tbgen new` leaves in a project: what was rendered, and the answers the user
chose."""

from pathlib import Path

from triton_backend_gen.scaffold import import_config, read_record, render_new_project, render_recipe
from triton_backend_gen.scaffold.record import RECORD_FILE, Recipe, pack, read_tree


class Answering:
    """A prompter that answers dtype FP16 and takes every other default, as a user pressing Enter would."""

    def ask(self, option, default):
        return "FP16" if option.key == "dtype" else default

    def show_error(self, error):
        raise AssertionError(error.message)


def test_the_record_holds_the_rendering_and_only_the_answers_chosen(tmp_path):
    project = render_new_project(
        "cpp-backend", tmp_path / "p", {"triton_version": "24.10"}, prompter=Answering()
    )
    record = read_record(project)
    assert record.files == read_tree(project) and "src/p.cc" in record.files
    assert record.recipe.given == {"project_name": "p", "triton_version": "24.10", "dtype": "FP16"}
    assert record.recipe.releases == ("24.10",) and record.recipe.template == "cpp-backend"


class RejectedThenDefault(Answering):
    """A user who types an invalid dims, then presses Enter."""

    def __init__(self):
        self.rejected = []

    def ask(self, option, default):
        return "abc" if option.key == "dims" and not self.rejected else default

    def show_error(self, error):
        self.rejected.append(error.message)


def test_a_rejected_answer_is_not_recorded(tmp_path):
    prompter = RejectedThenDefault()
    project = render_new_project(
        "cpp-backend", tmp_path / "p", {"triton_version": "24.10"}, prompter=prompter
    )
    assert len(prompter.rejected) == 1
    assert read_record(project).recipe.given == {"project_name": "p", "triton_version": "24.10"}


def test_render_recipe_returns_the_record_it_writes(tmp_path):
    recipe = Recipe("python-backend", "0", {"project_name": "p", "dtype": "INT32"})
    project, record = render_recipe(recipe, tmp_path / "p", {})
    assert pack(record) == (project / RECORD_FILE).read_bytes()


def test_the_record_is_deterministic(tmp_path):
    first = render_new_project("python-backend", tmp_path / "a" / "p", {"dtype": "INT32"})
    second = render_new_project("python-backend", tmp_path / "b" / "p", {"dtype": "INT32"})
    assert (first / RECORD_FILE).read_bytes() == (second / RECORD_FILE).read_bytes()


def test_label_files_of_an_imported_config_are_carried(tmp_path):
    config = tmp_path / "src" / "config.pbtxt"
    config.parent.mkdir()
    config.write_text(
        'name: "cls"\nmax_batch_size: 4\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "P" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]\n'
    )
    (config.parent / "labels.txt").write_text("a\nb\nc\n")
    project = render_new_project(
        "python-backend", tmp_path / "p", {}, imported=import_config(config, "python-backend")
    )
    record = read_record(project)
    assert record.recipe.carried == ("model_repository/cls/labels.txt",)
    assert record.files["model_repository/cls/labels.txt"].data == b"a\nb\nc\n"
    assert Path(project / "model_repository" / "cls" / "labels.txt").read_text() == "a\nb\nc\n"
