"""The package's floors, exactly as shared/DESIGN.md draws them.

A module imports only from floors below its own (never upward, not even
inside a function), no modules import each other in a loop (on one floor
either, through a package `__init__` too), and every import is absolute.
The checker below is tested on small trees it writes itself, so each rule
is seen to fail where it should.
"""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_independent

ROOT = Path(__file__).resolve().parent.parent

# Module prefix -> floor (shared/DESIGN.md); the longest matching prefix decides.
FLOORS = {
    # 0: one error root, files that can be trusted, lazy names, quiet TensorFlow
    "bertzoo.errors": 0,
    "bertzoo.io": 0,
    "bertzoo.lazy": 0,
    "bertzoo.quiet": 0,
    # 1: layers, tokenizers (registered by kind), presets and the loader registry
    "bertzoo.layers": 1,
    "bertzoo.tokenizers": 1,
    "bertzoo.presets": 1,
    "bertzoo.settings": 1,
    "bertzoo.loader_registry": 1,
    "bertzoo.input_checks": 1,
    "bertzoo.batching": 1,
    "bertzoo.packing": 1,
    "bertzoo.metrics": 1,
    "bertzoo.local_layout": 1,
    # 2: graphs only
    "bertzoo.models": 2,
    # 3: the one loader (formats and checkpoint families), preprocessing
    "bertzoo.convert": 3,
    "bertzoo.preprocessing": 3,
    "bertzoo.embedder": 3,
    "bertzoo.planner": 3,
    # 4: corpus streaming and preparation, examples, masking, pipelines, readers
    "bertzoo.data": 4,
    # 5: task kinds
    "bertzoo.tasks": 5,
    # 6: the runs; losses and distillers; serving and export
    "bertzoo.training": 6,
    "bertzoo.distill": 6,
    "bertzoo.serving": 6,
    "bertzoo.export": 6,
    "bertzoo.attention_maps": 6,
    # 7: command line and the package's public names
    "bertzoo.cli": 7,
    "bertzoo.__main__": 7,
    "bertzoo": 7,
}
# Same floor, but neither may import the other.
APART = {frozenset({"bertzoo.distill", "bertzoo.serving"})}


def module_name(path, root):
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def package_modules(root, package="bertzoo"):
    """{module name: path} for every .py file of `package` under `root`."""
    return {
        module_name(path, root): path
        for path in sorted((root / package).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def _resolve(name, modules):
    """The module an imported name lands in: itself, or its nearest package."""
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name if name in modules else None


# bertzoo.lazy's deferred imports: LazyModule("pkg.mod") and
# LazyAttribute("pkg.mod:name") import pkg.mod on first use.
LAZY = {"LazyModule", "LazyAttribute"}


def _lazy_target(node, package):
    """The module a `LazyModule`/`LazyAttribute` call names, if of `package`."""
    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
    if name not in LAZY or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    target = str(node.args[0].value).partition(":")[0]
    return target if target == package or target.startswith(package + ".") else None


def imports(path, modules, package="bertzoo", lazy=False):
    """(imported module, line) for each import of the package in `path`,
    wherever it stands (module level or inside a function); relative imports
    are reported as (None, line). With `lazy`, the deferred imports
    (`LAZY`) too: they run later, so they cannot make an import loop, but
    what they import must still be below."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if lazy and isinstance(node, ast.Call) and (target := _lazy_target(node, package)):
            yield _resolve(target, modules), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield None, node.lineno
                continue
            if node.module != package and not (node.module or "").startswith(package + "."):
                continue
            for alias in node.names:
                # `from bertzoo.x import y`: y is a submodule or a name in x.
                target = _resolve(f"{node.module}.{alias.name}", modules)
                yield target or _resolve(node.module, modules), node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == package or alias.name.startswith(package + "."):
                    yield _resolve(alias.name, modules), node.lineno


def floor_of(module, floors):
    prefix = max((p for p in floors if module == p or module.startswith(p + ".")), key=len)
    return floors[prefix], prefix


def import_graph(root, package="bertzoo", lazy=False):
    modules = package_modules(root, package)
    graph, relative = {}, []
    for module, path in modules.items():
        graph[module] = {}
        for target, line in imports(path, modules, package, lazy):
            if target is None:
                relative.append(f"{module}:{line}")
            elif target != module:
                graph[module].setdefault(target, line)
                # Importing pkg.sub.mod runs pkg.sub's __init__ first: that is an
                # import of pkg.sub too, unless the importer lives inside it.
                parent = target.rpartition(".")[0]
                while parent != package and not module.startswith(parent + "."):
                    if parent in modules:
                        graph[module].setdefault(parent, line)
                    parent = parent.rpartition(".")[0]
    return graph, relative


def upward_imports(graph, floors, apart=frozenset()):
    found = []
    for module, targets in graph.items():
        floor, prefix = floor_of(module, floors)
        for target, line in targets.items():
            target_floor, target_prefix = floor_of(target, floors)
            if prefix == target_prefix:
                continue
            if target_floor > floor or frozenset({prefix, target_prefix}) in apart:
                found.append(f"{module}:{line} imports {target} (floor {floor} -> {target_floor})")
    return sorted(found)


def cycles(graph):
    """Strongly connected groups of two or more modules (Tarjan), each
    sorted; a group is a set of modules that import each other in a loop."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(start):
        # Iterative, so a long chain of imports cannot hit the recursion limit.
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph.get(target, ()))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


# -- the rules, on the package -------------------------------------------------


def test_no_module_imports_from_a_higher_floor():
    graph, _ = import_graph(ROOT, lazy=True)
    assert upward_imports(graph, FLOORS, APART) == []


def test_no_import_cycles():
    graph, _ = import_graph(ROOT)
    assert cycles(graph) == []


def test_every_import_is_absolute():
    _, relative = import_graph(ROOT)
    assert relative == []


def test_every_module_has_a_floor():
    """A new top-level module must be given its place above."""
    for path in (ROOT / "bertzoo").iterdir():
        if path.name.startswith("__") or path.suffix not in ("", ".py"):
            continue
        assert f"bertzoo.{path.stem}" in FLOORS, path.name


# -- the checker, on trees that break each rule --------------------------------


def _tree(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return import_graph(tmp_path, "pkg")


FLOORS_PKG = {"pkg": 9, "pkg.low": 0, "pkg.high": 1}


def test_checker_finds_an_upward_import_hidden_in_a_function(tmp_path):
    graph, _ = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "def f():\n    from pkg.high import g\n",
            "pkg/high.py": "import pkg.low\n",
        },
    )
    assert upward_imports(graph, FLOORS_PKG) == ["pkg.low:2 imports pkg.high (floor 0 -> 1)"]


def test_checker_finds_an_upward_import_made_lazily(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/lazy.py": "class LazyModule: ...\nclass LazyAttribute: ...\n",
        "pkg/low.py": (
            "from pkg.lazy import LazyAttribute, LazyModule\n"
            "high = LazyModule('pkg.high')\n"
            "class Kind:\n"
            "    model = LazyAttribute('pkg.high:Model')\n"
            "numpy = LazyModule('numpy')\n"
        ),
        "pkg/high.py": "import pkg.low\nclass Model: ...\n",
    }
    _tree(tmp_path, files)
    floors = {**FLOORS_PKG, "pkg.lazy": 0}
    graph, _ = import_graph(tmp_path, "pkg", lazy=True)
    assert upward_imports(graph, floors) == ["pkg.low:2 imports pkg.high (floor 0 -> 1)"]
    found = imports(tmp_path / "pkg/low.py", package_modules(tmp_path, "pkg"), "pkg", True)
    assert sorted(set(found)) == [("pkg.high", 2), ("pkg.high", 4), ("pkg.lazy", 1)]
    # Without `lazy` (the loop check): a deferred import runs after both
    # modules are loaded, so pkg.high importing pkg.low makes no loop.
    assert upward_imports(import_graph(tmp_path, "pkg")[0], floors) == []
    assert cycles(import_graph(tmp_path, "pkg")[0]) == []


def test_checker_finds_cycles_on_one_floor_and_through_a_package_init(tmp_path):
    graph, _ = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            # a <-> b, hidden inside a function, as models/backbone <-> loading was
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "from pkg.low.b import x\n",
            "pkg/low/b.py": "def x():\n    from pkg.low import a\n",
            # a package whose __init__ re-exports a module that imports the package
            "pkg/high/__init__.py": "from pkg.high.c import y\n",
            "pkg/high/c.py": "from pkg.high import z\ny = 1\n",
            "pkg/high/z.py": "",
        },
    )
    # pkg.high.c imports the submodule pkg.high.z, not the package: no loop there.
    assert cycles(graph) == [["pkg.low.a", "pkg.low.b"]]
    graph["pkg.high.c"]["pkg.high"] = 1  # `from pkg.high import name_in_init`
    assert cycles(graph) == [["pkg.high", "pkg.high.c"], ["pkg.low.a", "pkg.low.b"]]


def test_checker_finds_relative_imports(tmp_path):
    _, relative = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/low.py": "from . import high\n"})
    assert relative == ["pkg.low:1"]
