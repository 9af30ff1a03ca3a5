"""Nothing a user wrote is deleted or replaced: exports, presets and
vocabulary files next to the user's own files."""

import json

import pytest

import bertzoo
from bertzoo import cli
from bertzoo.errors import IntegrityError, OutputError
from bertzoo.io import manifest as manifest_lib
from tests.conftest import tiny_backbone

pytestmark = pytest.mark.backend_independent

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(56)]


@pytest.fixture(scope="module")
def task_preset(tmp_path_factory):
    directory = tmp_path_factory.mktemp("task") / "preset"
    model = bertzoo.BertClassifier(tiny_backbone(), num_classes=2, label_names=["no", "yes"])
    model.save_to_preset(directory, tokenizer=bertzoo.BertTokenizer(VOCAB))
    return directory


def _tree(directory):
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_export_never_deletes_a_users_files(tmp_path, task_preset, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert cli.main(["export", str(task_preset), str(mine)]) == 2
    err = capsys.readouterr().err
    assert str(mine) in err and "not a bertzoo export" in err and err.count("\n") == 1
    assert _tree(mine) == {"notes.txt": b"keep me"}
    # An existing file: refused, left as it was, nothing renamed beside it.
    a_file = tmp_path / "model_out"
    a_file.write_text("a file")
    assert cli.main(["export", str(task_preset), str(a_file)]) == 2
    assert a_file.read_text() == "a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "model_out"]


@pytest.mark.slow
def test_export_overwrite_replaces_only_an_earlier_export(tmp_path, task_preset, capsys):
    out = tmp_path / "export"
    assert cli.main(["export", str(task_preset), str(out), "--sequence-length", "12"]) == 0
    first = manifest_lib.read_manifest(out)
    assert first["kind"] == "export" and "saved_model/saved_model.pb" in first["files"]
    # Without --overwrite an earlier export is kept.
    assert cli.main(["export", str(task_preset), str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert manifest_lib.read_manifest(out) == first
    # With it, replaced; a file of the user's inside the export stays.
    (out / "README.txt").write_text("deployment notes")
    assert (
        cli.main(["export", str(task_preset), str(out), "--overwrite", "--sequence-length", "16"])
        == 0
    )
    assert json.loads((out / "serving.json").read_text())["sequence_length"] == 16
    assert (out / "README.txt").read_text() == "deployment notes"
    assert "README.txt" not in manifest_lib.read_manifest(out)["files"]
    assert cli.main(["verify", str(out)]) == 0
    # A preset directory is not an export: --overwrite does not replace it.
    assert cli.main(["export", str(task_preset), str(task_preset), "--overwrite"]) == 2
    assert "holds a bertzoo preset, not an export" in capsys.readouterr().err
    assert bertzoo.BertClassifier.from_preset(task_preset).head_loaded


def test_presets_keep_a_users_files_and_never_replace_one(tmp_path):
    directory = tmp_path / "p"
    directory.mkdir()
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))  # the user's
    (directory / "NOTES.md").write_text("trained on my data")
    backbone = tiny_backbone()
    backbone.save_to_preset(directory)  # no name clash: the user's files are carried over
    backbone.save_to_preset(directory)
    assert (directory / "NOTES.md").read_text() == "trained on my data"
    assert bertzoo.BertTokenizer.from_preset(directory).vocabulary_size == 61
    listed = set(manifest_lib.read_manifest(directory)["files"])
    assert listed == {"config.json", "model.weights.h5"}
    # Saving a tokenizer there would replace the user's vocab.txt: refused,
    # and the directory is unchanged.
    before = _tree(directory)
    with pytest.raises(OutputError, match="vocab.txt exists and was not written by bertzoo"):
        bertzoo.BertTokenizer(VOCAB[:-1]).save_to_preset(directory)
    assert _tree(directory) == before
    # Damage is still found for bertzoo's own files; the user's are not judged.
    (directory / "NOTES.md").write_text("edited notes")
    assert bertzoo.BertBackbone.from_preset(directory).count_params() == backbone.count_params()
    with open(directory / "model.weights.h5", "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 8)
    with pytest.raises(IntegrityError, match="model.weights.h5 is damaged"):
        bertzoo.BertBackbone.from_preset(directory)


def test_a_preset_of_another_kind_is_refused(tmp_path, task_preset):
    out = tmp_path / "export"
    bertzoo.export_serving(task_preset, out, sequence_length=12)
    with pytest.raises(OutputError, match="holds a bertzoo export, not a preset"):
        tiny_backbone().save_to_preset(out)
    assert manifest_lib.verify_directory(out)["kind"] == "export"


def test_train_vocab_does_not_replace_a_file_without_overwrite(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a small corpus\nwith a few words\n" * 5)
    target = tmp_path / "vocab.txt"
    target.write_text("my vocabulary\n")
    command = ["train-vocab", str(corpus), "--output", str(target), "--vocab-size", "60"]
    assert cli.main(command) == 2
    assert "--overwrite" in capsys.readouterr().err.strip().splitlines()[-1]
    assert target.read_text() == "my vocabulary\n"
    assert cli.main(command + ["--overwrite"]) == 0
    assert target.read_text().startswith("[PAD]\n")


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "name", ["../outside.txt", "/etc/hostname", "a/../../outside.txt", "./x", "a//b", "a\\..\\b"]
)
def test_a_manifest_naming_files_outside_its_directory_is_refused(tmp_path, name, capsys):
    """A hostile manifest must not make `verify` hash files elsewhere and
    then call a system file damaged."""
    directory = tmp_path / "preset"
    directory.mkdir()
    (tmp_path / "outside.txt").write_text("not bertzoo's\n")
    entry = {"sha256": "0" * 64, "size": 14}
    (directory / manifest_lib.MANIFEST_FILE).write_text(
        manifest_lib.manifest_text("preset", {name: entry})
    )
    with pytest.raises(IntegrityError, match="not a file inside"):
        manifest_lib.verify_directory(directory, force=True)
    assert cli.main(["verify", str(directory)]) == 2
    err = capsys.readouterr().err
    assert "not a file inside" in err and len(err.strip().splitlines()) == 1
