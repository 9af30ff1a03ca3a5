"""What a fine-tuning run is given, checked (issue 30):

- hole 3: a resumed run refuses a training or validation file that changed
  since the run started (it resumed silently, on 3,001 examples instead of
  1,500), and says how to start over;
- hole 8: labels spelling one number differently ("1", "1.0", "01") are an
  error, not three classes; the label set is logged at the start;
- a fine-tuning run pointed at a pre-training run's output says what that
  directory is (it listed 35 "changed settings" and suggested the
  `--no-resume` that would delete that run's checkpoints), resume or not,
  and leaves it as it was."""

import json
import logging
import os
import shutil

import pytest

from bertzoo import tasks
from bertzoo.data.readers import TaskDataError
from bertzoo.io import fingerprint as fingerprint_lib
from bertzoo.tasks.sentences import SentenceSettings
from bertzoo.training import finetune_loop
from bertzoo.training.finetune import FinetuneError, run_finetuning
from bertzoo.training.pretrain import run_pretraining
from tests.reliability import test_runs
from tests.reliability.test_runs import _finetune_config, _listing, _pretrain_config

files = test_runs.files  # the fixture: task files, a vocabulary, a tiny preset

pytestmark = pytest.mark.backend_independent


def _copies(files, tmp_path):
    """The task files, copied: these tests change them."""
    out = dict(files)
    for name in ("train", "validation"):
        out[name] = tmp_path / files[name].name
        shutil.copy(files[name], out[name])
    return out


class _Stopped(Exception):
    """Stands for the kill of a run after its first epoch's checkpoint."""


def _stop_after_first_epoch(monkeypatch):
    real = finetune_loop._epoch

    def epoch(run, training, data, tensorboard, index, *rest):
        if index == 1:
            raise _Stopped
        return real(run, training, data, tensorboard, index, *rest)

    monkeypatch.setattr(finetune_loop, "_epoch", epoch)


# === Hole 3: changed input files ===


@pytest.mark.slow
def test_a_resumed_run_refuses_a_training_file_appended_to_after_the_first_checkpoint(
    tmp_path, files, monkeypatch
):
    files = _copies(files, tmp_path)
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        _stop_after_first_epoch(m)
        with pytest.raises(_Stopped):
            run_finetuning(_finetune_config(files, out))
    # The first epoch's checkpoint (named by its global step).
    assert [p.name for p in (out / "checkpoints").glob("ckpt-*") if p.is_dir()], out

    before = files["train"].stat().st_size
    lines = files["train"].read_text().splitlines()[1:]
    with open(files["train"], "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))  # twice the examples
    listing = _listing(out)
    with pytest.raises(FinetuneError) as e:
        run_finetuning(_finetune_config(files, out))
    message = str(e.value)
    assert message.startswith(
        f"--train {files['train']} changed since the run in {out} started (it grew from "
        f"{before:,} to {files['train'].stat().st_size:,} bytes)"
    ), message
    assert "--no-resume" in message and "\n" not in message
    assert _listing(out) == listing  # nothing written, nothing removed

    # --no-resume starts over on the file as it is, and records it.
    result = run_finetuning(_finetune_config(files, out, resume=False, epochs=1))
    assert result["train_examples"] == 64
    recorded = json.loads((out / "run_info.json").read_text())
    assert recorded["kind"] == "finetune" and set(recorded["inputs"]) == {"train", "validation"}
    assert recorded["inputs"]["train"]["size"] == files["train"].stat().st_size


@pytest.mark.slow
def test_a_resumed_run_continues_when_only_the_modification_time_changed(
    tmp_path, files, monkeypatch, caplog
):
    files = _copies(files, tmp_path)
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        _stop_after_first_epoch(m)
        with caplog.at_level(logging.INFO, logger="bertzoo"), pytest.raises(_Stopped):
            run_finetuning(_finetune_config(files, out))
    # The label set, logged once at the start, with its training counts (hole 8).
    labels = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Labels")]
    assert labels == ["Labels (2): '0' (16), '1' (16)"], labels
    os.utime(files["validation"], ns=(1, 1))  # copied again, touched: the same bytes
    with caplog.at_level(logging.INFO, logger="bertzoo"):
        result = run_finetuning(_finetune_config(files, out))
    assert result["history"][0]["epoch"] == 1 and len(result["history"]) == 2
    assert any("Resumed from" in r.getMessage() for r in caplog.records)


def test_a_fingerprint_sees_appends_truncation_and_edits_at_either_end(tmp_path):
    path = tmp_path / "train.tsv"
    body = b"".join(b"line %d\n" % i for i in range(400_000))  # > 2 MiB
    path.write_bytes(body)
    recorded = fingerprint_lib.fingerprint(path)
    assert fingerprint_lib.change(recorded, fingerprint_lib.fingerprint(path)) is None
    path.write_bytes(body + b"more\n")
    assert "grew from" in fingerprint_lib.change(recorded, fingerprint_lib.fingerprint(path))
    path.write_bytes(body[:-10])
    assert "shrank" in fingerprint_lib.change(recorded, fingerprint_lib.fingerprint(path))
    for at in (0, len(body) - 3):
        edited = bytearray(body)
        edited[at] ^= 1
        path.write_bytes(bytes(edited))
        assert "content changed" in fingerprint_lib.change(
            recorded, fingerprint_lib.fingerprint(path)
        )


# === Hole 8: label spellings ===


def test_labels_spelling_one_number_differently_are_an_error(tmp_path):
    """A binary file whose positives are written "1", "1.0" and "01" used to
    train a 4-class head."""
    path = tmp_path / "train.csv"
    rows = ["text,label", "good film,1", "bad film,0", "fine film,1.0", "great film,01"]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    kind = tasks.get("classification")
    settings = SentenceSettings(text_columns=("text",), label_column="label")
    with pytest.raises(TaskDataError) as e:
        kind.load(settings, path, _tokenizer(), 16, True)
    message = str(e.value)
    assert message == (
        f"{path}:4: labels '1', '1.0' and '01' all spell the number 1 and would become 3 "
        "different classes; write each class one way throughout the training and validation "
        "files (e.g. '1')"
    )


def test_a_validation_label_spelled_differently_says_how_training_spells_it(tmp_path):
    train, validation = tmp_path / "train.csv", tmp_path / "validation.csv"
    train.write_text("text,label\ngood film,1\nbad film,0\n", encoding="utf-8")
    validation.write_text("text,label\ngood film,1.0\n", encoding="utf-8")
    kind = tasks.get("classification")
    settings = SentenceSettings(text_columns=("text",), label_column="label")
    _, label_set = kind.load(settings, train, _tokenizer(), 16, True)
    with pytest.raises(
        TaskDataError,
        match=r"validation\.csv:2: label '1\.0' is not in the "
        r"label set \(the training file writes this number '1'\)",
    ):
        kind.load(settings, validation, _tokenizer(), 16, True, label_set)


def test_labels_that_are_only_numeric_looking_names_stay_apart(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\na,1\nb,2\nc,10\nd,pos\n", encoding="utf-8")
    kind = tasks.get("classification")
    settings = SentenceSettings(text_columns=("text",), label_column="label")
    _, label_set = kind.load(settings, path, _tokenizer(), 16, True)
    assert label_set.names == ("1", "10", "2", "pos")


def _tokenizer():
    import bertzoo

    return bertzoo.BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "film"])


# === A pre-training run's output ===


@pytest.mark.slow
@pytest.mark.parametrize("recorded_kind", [True, False])
def test_fine_tuning_into_a_pretraining_output_says_what_it_holds_and_changes_nothing(
    tmp_path, files, recorded_kind
):
    out = tmp_path / "pretrain"
    run_pretraining(_pretrain_config(files, out))
    if not recorded_kind:  # an output of bertzoo before the kind was recorded
        (out / "run_info.json").unlink(missing_ok=True)
    listing = _listing(out)
    for resume in (True, False):
        with pytest.raises(FinetuneError) as e:
            run_finetuning(_finetune_config(files, out, resume=resume))
        message = str(e.value)
        what = (
            "a pretrain run"
            if recorded_kind
            else "another kind of run (its recorded settings include "
        )
        assert message.startswith(f"--output {out} holds {what}"), message
        assert "use another --output" in message and "--no-resume" not in message
        assert "\n" not in message and len(message) < 400
        assert _listing(out) == listing  # its checkpoints and preset untouched
