"""A reader during a publish (issue 30, hole 2): `from_preset` in a loop
while another process publishes new versions of the same directories gets
every file of ONE version, never a mix, and never a false "damaged" error.

The writer (`race_writer.py`) marks each save's config, weights, heads and
task head with the save's number; a load is mixed when its parts name two
saves. The test prints its tally (run with -s): N of N loads whole.
"""

import subprocess
import sys
import threading
import time
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from tests.conftest import subprocess_env

pytestmark = pytest.mark.backend_independent

WRITER = Path(__file__).resolve().parent / "race_writer.py"
LOADS = 30  # of each kind, at least


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


@pytest.mark.slow
def test_from_preset_during_publishes_reads_one_version(tmp_path):
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
    results = {"backbone": [], "classifier": []}
    try:
        deadline = time.monotonic() + 120
        while saves[0] < 1:
            assert writer.poll() is None, f"the writer failed: {writer.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the writer saved nothing in 120 s"
            time.sleep(0.05)
        first = saves[0]
        overlapped = 0
        for n in range(2 * LOADS):
            kind = "backbone" if n % 2 == 0 else "classifier"
            before = saves[0]
            try:
                if kind == "backbone":
                    parts = _parts_of_backbone(bertzoo.BertBackbone.from_preset(backbone_dir))
                else:
                    parts = _parts_of_classifier(bertzoo.BertClassifier.from_preset(classifier_dir))
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
    print(f"{published} saves during the loads; {overlapped} of {2 * LOADS} loads overlapped one")
    # The loads must race the publications, not run between them.
    assert published >= LOADS and overlapped >= LOADS, (published, overlapped)
    for kind, outcomes in results.items():
        bad = [o for o in outcomes if o != "whole"]
        assert not bad, f"{len(bad)} of {len(outcomes)} {kind} loads: {bad[:3]}"
