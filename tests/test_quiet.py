"""Quiet by default: no TensorFlow, absl or CUDA banner line reaches the user
of the recipes or `python -m bertzoo` (BERTZOO_TF_LOGS=1 brings them back),
and the commands that need no model answer without importing TensorFlow."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bertzoo import quiet

ROOT = Path(__file__).resolve().parent.parent

# What users saw on a CPU machine before (TensorFlow 2.21, issue 31).
NOISE = re.compile(
    r"E0000|W0000|I0000|cuInit|CUDA|cuda|oneDNN|TensorFlow binary|absl::InitializeLog"
)
REAL_LINES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795688036.660589    8796 port.cc:153] oneDNN custom operations are on.",
    "I0000 00:00:1795688036.660953    8796 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "I0000 00:00:1795688037.029378    8796 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
    "E0000 00:00:1795688067.981425    9453 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "W0000 00:00:1795688067.981425    9453 some/file.cc:7] a warning",
]


# What a user's shell does not set: the log level, and bertzoo's own switches.
QUIET_VARIABLES = ("TF_CPP_MIN_LOG_LEVEL", quiet.ENV_VAR, quiet.CHILD_VAR)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in QUIET_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _noise(text):
    return [line for line in text.splitlines() if NOISE.search(line)]


@pytest.mark.backend_independent
def test_tensorflow_log_lines_are_recognised():
    for line in REAL_LINES:
        assert quiet.is_tf_log_line(line), line
    for line in (
        "error: Unknown preset 'nope': not a built-in preset name",
        "INFO bertzoo.training.pretrain: step 3/3: loss 6.7448",
        "Traceback (most recent call last):",
        "UserWarning: something",
    ):
        assert not quiet.is_tf_log_line(line), line


def _fake_tensorflow(tmp_path):
    """A `tensorflow` package that writes the real banner on descriptor 2 (as
    TensorFlow's C++ does) and one line of its own, and reports the log level
    it was imported under."""
    package = tmp_path / "fake" / "tensorflow"
    package.mkdir(parents=True)
    banner = "".join(line + "\n" for line in REAL_LINES[:5])
    (package / "__init__.py").write_text(
        textwrap.dedent(
            f"""\
            import os, sys
            os.write(2, {banner.encode()!r})
            os.write(2, b"a line of the program's own\\n")
            print("python stderr stays", file=sys.stderr)
            LEVEL = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
            """
        )
    )
    return tmp_path / "fake"


_IMPORT = (
    "from bertzoo.quiet import quiet_tensorflow\n"
    "quiet_tensorflow()\n"
    "import tensorflow\n"
    "print('level', tensorflow.LEVEL)\n"
)


@pytest.mark.backend_independent
def test_banner_written_while_tensorflow_imports_is_filtered(tmp_path):
    fake = _fake_tensorflow(tmp_path)
    env = _env(PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert _noise(done.stderr) == [], done.stderr
    # Everything else written meanwhile still reaches the user, in order.
    assert done.stderr.splitlines() == ["a line of the program's own", "python stderr stays"]
    # TensorFlow's later C++ errors (cuInit, oneDNN DT_INT64) need level 3.
    assert done.stdout.strip() == "level 3"

    # A level the user chose is kept.
    env["TF_CPP_MIN_LOG_LEVEL"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "level 1" and _noise(done.stderr) == []


@pytest.mark.backend_independent
def test_processes_a_quiet_one_starts_are_quiet(tmp_path):
    """A spawned worker imports bertzoo (to unpickle its function) before
    TensorFlow: the environment's mark makes it quiet too."""
    fake = _fake_tensorflow(tmp_path)
    env = _env(PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    child = "import bertzoo, tensorflow; print('level', tensorflow.LEVEL)"
    parent = (
        "import subprocess, sys\n"
        "from bertzoo.quiet import quiet_tensorflow\n"
        "quiet_tensorflow()\n"
        f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", parent], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert _noise(done.stderr) == [] and "a line of the program's own" in done.stderr
    assert done.stdout.strip() == "level 3"


@pytest.mark.backend_independent
def test_a_users_script_that_imports_bertzoo_first_is_quiet(tmp_path):
    """Without the mark (a process no quiet one started), importing bertzoo
    before TensorFlow quiets it too, unless the user chose TensorFlow's log
    level or asked for its lines; importing TensorFlow first leaves its
    banner as written."""
    fake = _fake_tensorflow(tmp_path)
    env = _env(PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))

    def run(code, **extra):
        done = subprocess.run(
            [sys.executable, "-c", code + "; print('level', tensorflow.LEVEL)"],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return len(_noise(done.stderr)), done.stdout.strip()

    assert run("import bertzoo, tensorflow") == (0, "level 3")
    assert run("import bertzoo, tensorflow", TF_CPP_MIN_LOG_LEVEL="1") == (4, "level 1")
    assert run("import bertzoo, tensorflow", BERTZOO_TF_LOGS="1") == (4, "level None")
    assert run("import tensorflow, bertzoo") == (4, "level None")


@pytest.mark.backend_independent
def test_bertzoo_tf_logs_brings_them_back(tmp_path):
    fake = _fake_tensorflow(tmp_path)
    env = _env(PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]), BERTZOO_TF_LOGS="1")
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert len(_noise(done.stderr)) == 4, done.stderr  # the banner, as TensorFlow wrote it
    assert done.stdout.strip() == "level None"  # TensorFlow's own default


@pytest.mark.backend_independent
def test_help_names_the_switch():
    done = subprocess.run(
        [sys.executable, "-m", "bertzoo", "--help"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "BERTZOO_TF_LOGS=1" in done.stdout


# === Commands that need no model import no TensorFlow ===

# One process runs every case in turn (each fresh interpreter costs about a
# second): a command's own modules stay loaded for the next, so the check
# after each case is what that case added. A case that loads TensorFlow is
# named; the ones after it are still run and reported.
_WRAPPER = """
import contextlib, io, json, runpy, sys, time
cases = json.loads(sys.argv[1])
results = []
for kind, target, args in cases:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        sys.argv = [target] + args
        try:
            if kind == "module":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        except SystemExit as e:
            code = e.code
    seconds = time.perf_counter() - start
    loaded = sorted(m for m in ("tensorflow", "keras", "jax") if m in sys.modules)
    results.append([out.getvalue(), err.getvalue(), ",".join(loaded) or "-", code, seconds])
print(json.dumps(results), file=sys.__stdout__)
"""


def _run_in_one_process(cases):
    """[(kind, target, args)] -> [(stdout, stderr, loaded modules, status,
    seconds)] for each case, all run by one fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, json.dumps(cases)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [tuple(r) for r in json.loads(done.stdout.strip().splitlines()[-1])]


def _run_cli(*args):
    ((out, err, loaded, status, seconds),) = _run_in_one_process([("module", "bertzoo", args)])
    return out, err.rstrip("\n"), loaded, int(status or 0), seconds


CLI_CASES = [
    (("--help",), 0, "plan"),
    (("presets",), 0, "| `bert_tiny` |"),
    (("plan", "bert_base", "--seq-len", "128"), 0, "largest batch"),
    (("plan", "nope"), 2, "error: Unknown preset 'nope'"),
    (("demo", "--preset", "nope"), 2, "error: Unknown preset 'nope'"),
    (("fill-mask", "nope", "a [MASK] b"), 2, "error: Unknown preset 'nope'"),
    (("attention", "nope", "a b", "--out", "/nonexistent/x.png"), 2, "error: Unknown preset"),
    (("demo", "--seq", "0"), 2, "error: --seq must be >= 1, got 0."),
]


@pytest.mark.backend_independent
def test_no_model_commands_do_not_import_tensorflow():
    results = _run_in_one_process([("module", "bertzoo", list(a)) for a, _, _ in CLI_CASES])
    for (args, status, needle), (out, err, loaded, code, seconds) in zip(
        CLI_CASES, results, strict=True
    ):
        err = err.rstrip("\n")
        assert int(code or 0) == status, (args, out, err)
        assert needle in (out if status == 0 else err), (args, out, err)
        if status:
            assert err.count("\n") == 0, (args, err)  # one line, no traceback
        assert loaded == "-", f"{args} imported {loaded}"
        assert seconds < 5, (args, seconds)  # generous: the proof is that TensorFlow stayed out


RECIPE_CASES = [
    ("pretrain", ("--help",), 0, "BERTZOO_TF_LOGS=1"),
    ("pretrain", ("--optimizer", "sgd"), 2, "invalid choice: 'sgd'"),
    ("finetune", ("--help",), 0, "--doc-stride"),  # a task kind's own setting
    ("finetune", ("--task", "nope"), 2, "invalid choice: 'nope'"),
    ("finetune", ("--epochs", "x"), 2, "invalid int value: 'x'"),
    ("distill", ("--help",), 0, "--layer-map"),
    ("distill", ("--method", "nope"), 2, "invalid choice: 'nope'"),
    ("distill", ("--layer-map", "a,b"), 2, "argument --layer-map"),
]


@pytest.mark.backend_independent
def test_recipe_help_does_not_import_tensorflow():
    results = _run_in_one_process(
        [("path", str(ROOT / "recipes" / f"{r}.py"), list(a)) for r, a, _, _ in RECIPE_CASES]
    )
    for (recipe, args, status, needle), (out, err, loaded, code, _) in zip(
        RECIPE_CASES, results, strict=True
    ):
        assert int(code or 0) == status and needle in (out + err), (recipe, args, out, err)
        assert loaded == "-", f"recipes/{recipe}.py {args} imported {loaded}"


@pytest.mark.backend_independent
def test_top_level_help_lists_every_command():
    from bertzoo.cli import COMMANDS

    out, _, _, code, _ = _run_cli("--help")
    listed = set(re.findall(r"^    ([a-z-]+) ", out, re.M))
    assert code == 0 and listed == set(COMMANDS), (sorted(COMMANDS), out)


@pytest.mark.backend_independent
def test_model_command_arguments_have_help():
    import argparse

    from bertzoo.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command in ("demo", "verify", "fill-mask", "attention", "plan"):
        for action in sub.choices[command]._actions:
            assert action.help, f"{command}: {action.dest} has no help text"


# === The real thing: TensorFlow loads, and nothing of its banner shows ===


@pytest.mark.slow
def test_cli_demo_is_quiet():
    done = subprocess.run(
        [sys.executable, "-m", "bertzoo", "demo", "--preset", "bert_tiny", "--seq", "8"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "parameters: 4,385,920" in done.stdout
    assert _noise(done.stdout + done.stderr) == [], done.stderr


# The pre-training recipe's quiet is checked on the README's first command
# itself, run exactly as written: tests/test_default_runs.py.
