"""docs/korean.md's tutorial, run as written on a realistic small corpus:
tests/fixtures/korean_documents.txt (345 varied sentences in 69
documents)."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, subprocess_env

# A page of recipe commands: the recipes' backends are covered by their own
# tests; the page is checked once, in the TensorFlow pass.
pytestmark = pytest.mark.backend_independent

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "korean.md"


def tutorial_block():
    """The bash block after the page's `<!-- korean-tutorial -->` marker."""
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(r"<!-- korean-tutorial -->\s*```bash\n(.*?)```", text, re.S)
    assert match, "docs/korean.md lost its tutorial block"
    return match.group(1)


def test_the_tutorial_block_is_what_the_page_promises():
    block = tutorial_block()
    # Korean settings on both the vocabulary and the run, a held-out fifth.
    assert block.count("--no-strip-accents") == 2 and "--eval-fraction 0.2" in block
    assert "--output ko_vocab.txt" in block and "--output runs/ko" in block


@pytest.mark.slow
def test_korean_tutorial_runs_as_written_and_learns(tmp_path):
    (tmp_path / "ko.txt").write_text(
        (FIXTURES / "korean_documents.txt").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    result = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + tutorial_block()],
        cwd=tmp_path,
        env=subprocess_env("2"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    # The vocabulary keeps Hangul syllables whole: no jamo, no unknown word.
    vocab = (tmp_path / "ko_vocab.txt").read_text(encoding="utf-8").splitlines()
    assert not any(0x1100 <= ord(ch) <= 0x11FF for token in vocab for ch in token)
    assert "정말" in vocab
    line = re.search(r"^(.*)\nembeddings:", result.stdout, re.M).group(1)
    assert "[UNK]" not in line and line.startswith("이 / ")
    assert re.search(r"embeddings: \(3, 128\)", result.stdout), result.stdout
    # The held-out set is big enough, or the run said it is not.
    metrics = json.loads((tmp_path / "runs" / "ko" / "metrics.json").read_text())
    assert metrics["eval_held_out"] and metrics["objective"] == "sop"
    warned = "The held-out evaluation has" in result.stderr
    assert metrics["eval_examples"] >= 100 or warned, result.stderr[-3000:]
    # Held-out masked-LM accuracy rises, and the held-out loss falls.
    initial, final = metrics["initial_masked_lm_accuracy"], metrics["final_masked_lm_accuracy"]
    assert final > initial + 0.04, (initial, final)
    assert metrics["final_loss"] < metrics["initial_loss"] - 0.3, metrics
    # What the page says of step 3: the pre-trained (MLM + SOP) model's
    # mean-pooled vectors of any two Korean sentences point almost the same
    # way; it is not a sentence embedder.
    same, other = map(
        float, re.search(r"^similarity: (\S+) vs (\S+)$", result.stdout, re.M).groups()
    )
    print(f"similarities: {same:.4f} vs {other:.4f}")
    assert min(same, other) > 0.9, (same, other)
