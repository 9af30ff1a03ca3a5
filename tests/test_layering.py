"""The package's floors (README, Layout): a module imports only from its own
floor or below, never upward, not even inside a function."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_independent

ROOT = Path(__file__).resolve().parent.parent

# Module prefix -> floor; the longest matching prefix decides.
FLOORS = {
    "bertzoo.errors": 0,
    "bertzoo.io": 0,
    "bertzoo.lazy": 0,
    "bertzoo.presets": 1,
    "bertzoo.loader_registry": 1,
    "bertzoo.input_checks": 1,
    "bertzoo.batching": 1,
    "bertzoo.layers": 1,
    "bertzoo.tokenizers": 1,
    "bertzoo.metrics": 1,
    "bertzoo.models": 2,
    "bertzoo.convert": 3,  # the preset loader
    "bertzoo.preprocessing": 3,
    "bertzoo.embedder": 3,
    "bertzoo.data": 4,
    "bertzoo.planner": 4,
    "bertzoo.tasks": 5,
    "bertzoo.distill": 6,
    "bertzoo.serving": 6,
    "bertzoo.attention_maps": 6,
    "bertzoo.training": 7,
    "bertzoo.cli": 7,
    "bertzoo.__main__": 8,
    "bertzoo": 8,  # the package's lazy names
}
# Same floor, but neither may import the other.
APART = {frozenset({"bertzoo.distill", "bertzoo.serving"})}


def _place(module):
    prefix = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len)
    return FLOORS[prefix], prefix


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "bertzoo":
                yield from ((f"bertzoo.{a.name}", node.lineno) for a in node.names)
            else:
                yield node.module, node.lineno
        elif isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)


def test_no_module_imports_from_a_higher_floor():
    upward = []
    for path in sorted((ROOT / "bertzoo").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        floor, prefix = _place(module)
        for target, line in _imports(path):
            if not target.startswith("bertzoo.") or prefix == "bertzoo":
                continue
            target_floor, target_prefix = _place(target)
            if target_floor > floor or frozenset({prefix, target_prefix}) in APART:
                upward.append(f"{module}:{line} imports {target} (floor {floor} -> {target_floor})")
    assert upward == []


def test_every_module_has_a_floor():
    """A new top-level module must be given its place above."""
    for path in (ROOT / "bertzoo").iterdir():
        if (
            path.name.startswith("__")
            or path.name == "__pycache__"
            or path.suffix not in ("", ".py")
        ):
            continue
        assert f"bertzoo.{path.stem}" in FLOORS, path.name
