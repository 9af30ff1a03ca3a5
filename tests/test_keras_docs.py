"""docs/keras.md runs as written: its Python snippets, in order, as one
script, on the real MiniLM checkpoint, without a Keras warning."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import subprocess_env

# The page's Keras calls are run on both backends by tests/models/test_strings.py;
# this test checks the page itself, once, in the TensorFlow pass.
pytestmark = pytest.mark.backend_independent

DOC = Path(__file__).resolve().parents[1] / "docs" / "keras.md"


def snippets():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_page_has_its_snippets():
    code = snippets()
    assert len(code) >= 5
    assert any("model.fit(texts, labels" in c for c in code)
    assert any("predict_proba" in c for c in code)


@pytest.mark.slow
def test_the_snippets_run_as_written(minilm_dir, tmp_path):
    script = tmp_path / "keras_doc.py"
    # Any warning (a Keras UserWarning included) fails the run.
    script.write_text(
        "import warnings\nwarnings.simplefilter('error', UserWarning)\n" + "\n".join(snippets()),
        encoding="utf-8",
    )
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=900,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    accuracy = re.search(r"^\[([0-9., ]+)\]$", run.stdout, re.M)
    assert accuracy, run.stdout[-3000:]
    assert float(accuracy.group(1).split(",")[-1]) == 1.0, accuracy.group(0)
    # The LoRA section's count: the adapters on every projection and the head.
    assert "480386 of 23045762 parameters train" in run.stdout, run.stdout[-3000:]
