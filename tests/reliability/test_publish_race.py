"""A reader during a publish (issue 30, hole 2): `from_preset` in a loop
while another process publishes new versions of the same directories gets
every file of ONE version, never a mix, and never a false "damaged" error.

The writer (`race_writer.py`) marks each save's config, weights, heads and
task head with the save's number; a load is mixed when its parts name two
saves. The test prints its tally (run with -s): N of N loads whole. CI
makes LOADS loads of each kind; `--full` the number docs/files.md quotes.
"""

import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.errors import IntegrityError
from bertzoo.io import snapshot
from bertzoo.io.publish import publish_directory
from bertzoo.models.fill_mask import masked_lm_model
from bertzoo.serving import serving_model_from_preset
from tests.conftest import size, subprocess_env

pytestmark = pytest.mark.backend_independent

WRITER = Path(__file__).resolve().parent / "race_writer.py"
# Loads of each kind, at least: 30 under `--full`, 5 in CI. The bugs this
# was written for mix every load they touch (planted, 2026-12-07): readers
# without a pinned version (before bfaebe8) got 0 of 5 loads whole of each
# kind (0 of 30 at full size); the serving model's tokenizer, or the
# embedder's preprocessor, read from the directory rather than its pinned
# view, 0 of 5 (serving: 0 of 30 at full size).
LOADS = size(ci=5, full=30)
SIZE = dict(
    vocabulary_size=61, num_layers=2, num_heads=2, hidden_dim=10, intermediate_dim=26, dropout=0.0
)


def _same(values, what):
    values = np.asarray(keras.ops.convert_to_numpy(values)).ravel()
    if not np.all(values == values[0]):
        raise AssertionError(f"{what} holds the values of several saves: {sorted(set(values))}")
    return int(values[0])


def _parts_of_backbone(backbone):
    return {
        "config": int(backbone.preset_info["description"].removeprefix("save ")),
        "weights": _same(backbone.transformer_layers[0].output_dense.bias, "weights"),
        "heads": _same(backbone.head_tensors["cls.predictions.bias"], "heads"),
    }


def _parts_of_classifier(classifier):
    return {
        **_parts_of_backbone(classifier.backbone),
        "task section": int(classifier.label_names[0].split("-")[0]),
        "task head": _same(classifier.head.bias, "task head"),
    }


def _parts_of_tokenizer(tokenizer):
    return int(tokenizer.vocabulary[-1].removeprefix("save"))


def _parts_of_embedder(embedder):
    return {
        **_parts_of_backbone(embedder.backbone),
        "tokenizer": _parts_of_tokenizer(embedder.preprocessor.tokenizer),
    }


def _parts_of_masked_lm(preset):
    # What `fill_mask(preset, ...)` reads: the model with its head and the
    # tokenizer.
    pretrainer, tokenizer = masked_lm_model(preset)
    assert "cls.predictions.bias" in pretrainer.head_weights_loaded
    return {
        **_parts_of_backbone(pretrainer.backbone),
        "tokenizer": _parts_of_tokenizer(tokenizer),
    }


def _parts_of_serving(serving):
    return {
        **_parts_of_classifier(serving.task_model),
        "tokenizer": _parts_of_tokenizer(serving.tokenizer),
        "run settings": int(serving.label_names[0].split("-")[0]),
    }


def _race(tmp_path, readers):
    """Loads with each of `readers` (kind -> function of the two preset
    directories returning the save number of each part) in turn, LOADS
    times each, while `race_writer.py` publishes; asserts every load whole."""
    backbone_dir, classifier_dir = tmp_path / "backbone", tmp_path / "classifier"
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), str(backbone_dir), str(classifier_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    saves = [0]

    def follow():
        for line in writer.stdout:
            if line.startswith("saved "):
                saves[0] = int(line.split()[1])

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    kinds = list(readers)
    results = {kind: [] for kind in kinds}
    total = len(kinds) * LOADS
    try:
        deadline = time.monotonic() + 120
        while saves[0] < 1:
            assert writer.poll() is None, f"the writer failed: {writer.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the writer saved nothing in 120 s"
            time.sleep(0.05)
        first = saves[0]
        overlapped = 0
        for n in range(total):
            kind = kinds[n % len(kinds)]
            before = saves[0]
            try:
                parts = readers[kind](backbone_dir, classifier_dir)
                outcome = "whole" if len(set(parts.values())) == 1 else f"mixed {parts}"
            except Exception as e:  # counted: a false error is a failure too
                outcome = f"error {type(e).__name__}: {e}"
            overlapped += saves[0] != before
            results[kind].append(outcome)
            keras.backend.clear_session(free_memory=False)
        published = saves[0] - first
    finally:
        writer.kill()
        writer.communicate()
    # Old versions readers held were removed by their last reader: none pile
    # up (a kill can leave the one being published or retired).
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert len(leftovers) <= 2, leftovers
    for kind, outcomes in results.items():
        whole = outcomes.count("whole")
        print(f"\n{kind}: {whole} of {len(outcomes)} loads whole")
    print(f"{published} saves during the loads; {overlapped} of {total} loads overlapped one")
    # The loads must race the publications, not run between them.
    assert published >= LOADS and overlapped >= LOADS, (published, overlapped)
    for kind, outcomes in results.items():
        bad = [o for o in outcomes if o != "whole"]
        assert not bad, f"{len(bad)} of {len(outcomes)} {kind} loads: {bad[:3]}"


@pytest.mark.slow
def test_from_preset_during_publishes_reads_one_version(tmp_path):
    _race(
        tmp_path,
        {
            "backbone": lambda b, c: _parts_of_backbone(bertzoo.BertBackbone.from_preset(b)),
            "classifier": lambda b, c: _parts_of_classifier(bertzoo.BertClassifier.from_preset(c)),
        },
    )


@pytest.mark.slow
def test_model_and_tokenizer_readers_during_publishes_read_one_version(tmp_path):
    """TextEmbedder.from_preset, fill-mask's loader and the serving model's
    read the model, its tokenizer (and the run's serving settings) from one
    version too. (Without the warm-up at load, which reads no file.)"""
    readers = {
        "TextEmbedder.from_preset": lambda b, c: _parts_of_embedder(
            bertzoo.TextEmbedder.from_preset(b, warm=False)
        ),
        "fill-mask's masked_lm_model": lambda b, c: _parts_of_masked_lm(b),
    }
    if keras.backend.backend() == "tensorflow":  # the serving model runs TensorFlow ops
        readers["serving_model_from_preset"] = lambda b, c: _parts_of_serving(
            serving_model_from_preset(c, warm=False)
        )
    _race(tmp_path, readers)


# === The mechanism, step by step (fast) ===


def _publish(target, text):
    with publish_directory(target, "preset") as staging:
        (staging / "a.txt").write_text(text)
        (staging / "b.txt").write_text(text)


def test_a_pinned_version_outlives_a_publish_and_its_last_reader_removes_it(tmp_path):
    target = tmp_path / "model"
    _publish(target, "one")
    with snapshot.pinned_directory(target) as view:
        assert view != target and (view / "a.txt").read_text() == "one"
        _publish(target, "two")  # retired, not removed: this reader holds it
        _publish(target, "three")  # the next publication leaves it too
        assert (view / "b.txt").read_text() == "one"
        assert (target / "b.txt").read_text() == "three"
        retired = [p.name for p in tmp_path.iterdir() if p.name.startswith(".model.old.")]
        assert len(retired) == 1, retired
        with snapshot.pinned_directory(view) as inner:  # views nest
            assert inner == view
    # Its last reader removed it; the view is gone too.
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert not view.exists()
    # Unread, a replaced version is removed by the publication itself.
    _publish(target, "four")
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_errors_and_records_name_the_directory_not_its_view(tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures/hf_variants/distilbert", hf)
    backbone = bertzoo.BertBackbone.from_preset(str(hf))
    assert (
        backbone.preset_info["description"]
        == f"Converted from the Hugging Face checkpoint in {hf}."
    )
    damaged = tmp_path / "damaged"
    bertzoo.BertBackbone(**SIZE).save_to_preset(damaged)
    (damaged / "model.weights.h5").write_bytes(b"x")
    with pytest.raises(IntegrityError) as e:
        bertzoo.BertClassifier.from_preset(str(damaged), num_classes=2)
    assert str(e.value).startswith(f"{damaged}/model.weights.h5 is damaged"), str(e.value)
    with pytest.raises(ValueError, match=re.escape(f"{str(hf)!r} records no classifier head")):
        bertzoo.BertClassifier.from_preset(str(hf))
