"""The shape of the code: the largest modules and functions, and the calls
with the most arguments, in bertzoo/ and recipes/ (what shared/DESIGN.md's
size targets are read against: modules under about 600 lines, functions
under about 80, calls under about 7 arguments).

    python benchmarks/code_shape.py            # the tables
    python benchmarks/code_shape.py --json     # the same, as JSON

Lines are physical lines of the file or of the function's source span
(decorators and docstring included). Arguments are positional plus keyword
arguments of one call, `*args`/`**kwargs` counted as one each. A call of a
capitalised name with keyword arguments only builds a record (a `_Spec`
table row, a dataclass of settings): those are variants as data, listed
apart from the calls that hand work from one function to another.
"""

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _files(root):
    for folder in ("bertzoo", "recipes"):
        yield from sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _is_record(call):
    callee = (
        call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    )
    return callee.lstrip("_")[:1].isupper() and not call.args and bool(call.keywords)


def measure(root=ROOT, top=10):
    modules, functions, calls, records = [], [], [], []
    for path in _files(root):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(root))
        modules.append((len(text.splitlines()), name))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                functions.append((node.end_lineno - start + 1, f"{name}:{node.lineno} {node.name}"))
            elif isinstance(node, ast.Call):
                count = len(node.args) + len(node.keywords)
                (records if _is_record(node) else calls).append((count, f"{name}:{node.lineno}"))
    biggest = lambda rows: [{"size": n, "where": w} for n, w in sorted(rows, reverse=True)[:top]]
    return {
        "modules": biggest(modules),
        "functions": biggest(functions),
        "calls": biggest(calls),
        "records": biggest(records),
        "over_targets": {
            "modules_over_600_lines": sum(n > 600 for n, _ in modules),
            "functions_over_80_lines": sum(n > 80 for n, _ in functions),
            "calls_over_6_arguments": sum(n > 6 for n, _ in calls),
        },
        "totals": {"modules": len(modules), "lines": sum(n for n, _ in modules)},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--top", type=int, default=10, help="rows per table (default 10)")
    args = parser.parse_args()
    result = measure(top=args.top)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for table in ("modules", "functions", "calls", "records"):
        print(f"largest {table}:")
        for row in result[table]:
            print(f"  {row['size']:5d}  {row['where']}")
    print("over the targets:", result["over_targets"], "totals:", result["totals"])


if __name__ == "__main__":
    main()
