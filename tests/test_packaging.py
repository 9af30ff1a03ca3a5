"""The wheel ships the presets: a plain (non-editable) install works from any
directory."""

import json
import os
import shutil
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


def _source_copy(target):
    """What the build reads (pyproject.toml, README.md, LICENSE, bertzoo/, presets/),
    copied to `target`: building there leaves nothing (build/, *.egg-info)
    in the checkout."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("bertzoo", "presets"):
        shutil.copytree(ROOT / name, target / name, ignore=ignore)
    return target


@pytest.mark.slow
def test_wheel_contains_presets_and_works_from_another_directory(tmp_path):
    source = _source_copy(tmp_path / "source")
    before = sorted(p.name for p in ROOT.iterdir())
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
    )
    new = {p.name for p in ROOT.iterdir()} - set(before)
    assert not [n for n in new if n in ("build", "dist") or n.endswith(".egg-info")], new
    (wheel,) = (tmp_path / "dist").glob("bertzoo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in preset_lib.builtin_presets():
        assert f"bertzoo/presets_data/{name}.json" in names
    assert "bertzoo/tokenizers/unicode_tables.json" in names
    # The license pyproject.toml declares ships with the wheel, as its full text.
    (license_name,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    license_text = zipfile.ZipFile(wheel).read(license_name).decode()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
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
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module_file, root, params = json.loads(out.strip().splitlines()[-1])
    assert module_file.startswith(str(target))
    assert root.startswith(str(target))
    assert params == 109_482_240


def test_docs_preset_table_is_current():
    page = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    assert presets_table() in page


def test_cli_presets_and_demo(capsys):
    assert main(["presets"]) == 0
    assert "| `albert_base` | 12 (1 shared) |" in capsys.readouterr().out
    assert main(["demo", "--preset", "bert_tiny", "--batch", "3", "--seq", "5"]) == 0
    out = capsys.readouterr().out
    assert "parameters: 4,385,920" in out
    assert "sequence_output: shape (3, 5, 128)" in out
    assert "pooled_output: shape (3, 128)" in out


def test_every_package_directory_is_in_the_wheel_list():
    """A new subpackage missing from pyproject's `packages` would be left out
    of the installed wheel (and only fail for users)."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "bertzoo").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages"


def _run_python(code):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_import_bertzoo_is_light_and_metrics_need_no_tensorflow():
    out = _run_python(
        "import sys, bertzoo, bertzoo.metrics, bertzoo.errors, bertzoo.presets\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'jax') if m in sys.modules)\n"
        "print(heavy)\n"
        "assert bertzoo.metrics.accuracy([1, 0], [1, 1]) == 0.5\n"
    )
    assert out.strip() == "[]"


def test_lazy_names_all_resolve():
    """Every name the package exports loads on first use, is cached, and is
    listed by dir(); an unknown name is an AttributeError."""
    out = _run_python(
        "import bertzoo\n"
        "for name in bertzoo.__all__:\n"
        "    value = getattr(bertzoo, name)\n"
        "    assert value is getattr(bertzoo, name), name\n"
        "    assert name in dir(bertzoo), name\n"
        "assert bertzoo.BertBackbone.__module__ == 'bertzoo.models.backbone'\n"
        "assert issubclass(bertzoo.PresetError, bertzoo.BertzooError)\n"
        "try:\n"
        "    bertzoo.NoSuchName\n"
        "except AttributeError as e:\n"
        "    print('AttributeError', e)\n"
    )
    assert "AttributeError module 'bertzoo' has no attribute 'NoSuchName'" in out


@pytest.mark.parametrize(
    "order",
    [
        "import bertzoo, keras",
        "import keras, bertzoo",
        # Keras first imported by a bertzoo module, through a lazy name.
        "import bertzoo; bertzoo.BertTokenizer; import keras",
    ],
)
def test_keras_classes_are_registered_whichever_is_imported_first(order):
    """`keras.saving.load_model` finds bertzoo's classes by registered name:
    they are registered as soon as both packages are imported."""
    out = _run_python(
        f"{order}\n"
        "names = ['BertBackbone', 'BertClassifier', 'BertSpanQA', 'ServingModel',\n"
        "         'BertTransformerBlock', 'WarmupLinearDecay', 'BertPretrainer',\n"
        "         'ElectraPretrainer']\n"
        "print([keras.saving.get_registered_object('bertzoo>' + n) is not None for n in names])\n"
    )
    assert out.strip().splitlines()[-1] == str([True] * 8)
