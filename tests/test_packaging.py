"""The wheel ships the presets: a plain (non-editable) install works from any
directory."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bertzoo import presets as preset_lib
from bertzoo.cli import main, presets_table

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_contains_presets_and_works_from_another_directory(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path / "dist"), str(ROOT)],
        check=True,
    )
    (wheel,) = (tmp_path / "dist").glob("bertzoo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in preset_lib.builtin_presets():
        assert f"bertzoo/presets_data/{name}.json" in names
    assert "bertzoo/tokenizers/unicode_tables.json" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    code = (
        "import bertzoo, bertzoo.convert, json; from bertzoo import presets as p;"
        "from bertzoo.tokenizers import unicode as u;"
        "b = bertzoo.BertBackbone.from_preset('bert_base');"
        "assert u._shipped_tables(), 'unicode tables not shipped';"
        "print(json.dumps([bertzoo.__file__, str(p._builtin_root()), b.count_params()]))"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, capture_output=True, text=True
    ).stdout
    module_file, root, params = json.loads(out.strip().splitlines()[-1])
    assert module_file.startswith(str(target))
    assert root.startswith(str(target))
    assert params == 109_482_240


def test_readme_preset_table_is_current():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert presets_table() in readme


def test_cli_presets_and_demo(capsys):
    assert main(["presets"]) == 0
    assert "| `albert_base` | 12 (1 shared) |" in capsys.readouterr().out
    assert main(["demo", "--preset", "bert_tiny", "--batch", "3", "--seq", "5"]) == 0
    out = capsys.readouterr().out
    assert "parameters: 4,385,920" in out
    assert "sequence_output: shape (3, 5, 128)" in out
    assert "pooled_output: shape (3, 128)" in out
