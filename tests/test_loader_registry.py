"""The registry through which the models reach the preset loader
(`bertzoo.loader_registry`)."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from bertzoo import loader_registry
from bertzoo.errors import PresetError

pytestmark = pytest.mark.backend_independent

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def empty_registry(monkeypatch):
    monkeypatch.setattr(loader_registry, "_loader", None)
    monkeypatch.setattr(loader_registry, "_loader_module", None)


def test_no_loader_is_a_clear_error(empty_registry):
    with pytest.raises(PresetError, match="No preset loader is registered"):
        loader_registry.preset_loader()


def test_an_incomplete_loader_is_refused(empty_registry):
    loader = types.SimpleNamespace(load_backbone=lambda *a, **k: None)
    with pytest.raises(TypeError, match="save_backbone"):
        loader_registry.register_loader(loader)
    with pytest.raises(PresetError):
        loader_registry.preset_loader()


def test_the_named_module_is_imported_on_first_use():
    """`import bertzoo` names the loader without importing it; the first
    `preset_loader()` imports it, and importing it registers it."""
    code = (
        "import sys, bertzoo\n"
        "from bertzoo import loader_registry\n"
        "assert 'bertzoo.convert.loader' not in sys.modules\n"
        "print(loader_registry.preset_loader().__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "bertzoo.convert.loader"


def test_the_package_names_the_convert_loader():
    import bertzoo  # noqa: F401  (names the loader module)

    assert loader_registry._loader_module == "bertzoo.convert.loader"
    assert loader_registry.preset_loader().__name__ == "bertzoo.convert.loader"
