"""Mutation check of the numeric core: makes each of a handful of plausible
bugs in a copy of the package and runs the parity tests on it; every bug
must make at least one test fail.

    python tests/mutation_check.py          # prints one line per bug, exits 1 if one survives

`tests/test_mutations.py` runs it. Each bug is one textual edit of one
source file (the edit must apply exactly as often as stated, so a refactor
that moves the code makes the check fail loudly instead of testing
nothing). The tests run
are the fast reference checks: transformers' outputs and heads on small
random BERT/ALBERT/DistilBERT checkpoints, MiniLM against transformers, and
pair truncation against the reference tokenizers.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TESTS = [
    "tests/convert/test_hf_variants.py::test_variant_matches_transformers_and_round_trips",
    "tests/convert/test_hf_variants.py::test_pretraining_heads_match_transformers",
    "tests/convert/test_hf.py::test_minilm_matches_transformers",
    "tests/test_preprocessing.py::test_truncation_closed_form_equals_reference_loop",
    "tests/test_preprocessing.py::test_pair_truncation_matches_reference",
]

# name -> (file, text, replacement[, how many times the text stands there])
MUTATIONS = {
    "wrong GELU (tanh for erf)": (
        "bertzoo/layers/common.py",
        '"gelu": lambda x: keras.activations.gelu(x, approximate=False)',
        '"gelu": lambda x: keras.activations.gelu(x, approximate=True)',
    ),
    "LayerNorm epsilon 1e-5 in the encoder": (
        "bertzoo/layers/transformer.py",
        "        self.layer_norm_epsilon = layer_norm_epsilon\n",
        "        self.layer_norm_epsilon = layer_norm_epsilon\n        layer_norm_epsilon = 1e-5\n",
    ),
    "attention scale 1/d instead of 1/sqrt(d)": (
        "bertzoo/layers/attention.py",
        "1.0 / math.sqrt(self.head_dim)",
        "1.0 / self.head_dim",
        1,  # one scale for the explicit, fused and blocked paths
    ),
    "padding mask sign flipped": (
        "bertzoo/layers/sequence_numbers.py",
        "return ops.logical_and(ops.not_equal(k, 0), same)",
        "return ops.logical_and(ops.equal(k, 0), same)",
    ),
    "segment embeddings dropped": (
        "bertzoo/layers/embeddings.py",
        "            x = x + self.segment_embedding(ops.where(valid_segment, segment_ids, 0))",
        "            x = x + 0 * self.segment_embedding(ops.where(valid_segment, segment_ids, 0))",
    ),
    "masked-LM head not tied (its own table)": (
        "bertzoo/layers/heads.py",
        "        table = ops.cast(self.token_embedding.embeddings, h.dtype)  # (V, E)",
        "        table = ops.cast(\n"
        "            keras.random.normal(ops.shape(self.token_embedding.embeddings), seed=1) * 0.2,\n"
        "            h.dtype,\n"
        "        )",
    ),
    "position ids off by one": (
        "bertzoo/layers/embeddings.py",
        "ops.slice(table, (0, 0), (seq_len, self.embedding_dim))",
        "ops.slice(table, (1, 0), (seq_len, self.embedding_dim))",
    ),
    "pair truncation rules swapped": (
        "bertzoo/preprocessing.py",
        '    if rule == "hf-fast":\n        half_up = tf.where',
        '    if rule == "google":\n        half_up = tf.where',
    ),
}


# Bugs whose catching test is not the first in TESTS: that test is named
# first (the others still run after it, so a bug it misses can be caught by
# them). pytest keeps that order while tests/time_budget.py gives the files
# equal budgets (it runs files with larger budgets first).
FIRST = {
    "masked-LM head not tied (its own table)": (
        "tests/convert/test_hf_variants.py::test_pretraining_heads_match_transformers"
    ),
    "pair truncation rules swapped": (
        "tests/test_preprocessing.py::test_pair_truncation_matches_reference"
    ),
}


def _copy_tree(target):
    for name in ("pyproject.toml",):
        shutil.copy2(ROOT / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("bertzoo", "presets", "tests"):
        shutil.copytree(ROOT / name, target / name, ignore=ignore)


def _run_tests(tree, first=None):
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("PYTEST_ADDOPTS", None)
    tests = ([first] if first else []) + [t for t in TESTS if t != first]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )


def _failed_test(done):
    for line in done.stdout.splitlines():
        if line.startswith("FAILED "):
            return line.split()[1].split("::", 1)[1].split(" ")[0]
    return None


def run():
    """{bug: the first test that failed (None: survived)}; raises if the
    unmutated copy does not pass or an edit does not apply exactly once."""
    caught = {}
    assert set(FIRST) <= set(MUTATIONS) and set(FIRST.values()) <= set(TESTS), FIRST
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        start = time.perf_counter()
        control = _run_tests(tree)
        if control.returncode != 0:
            raise RuntimeError("the unmutated copy fails its tests:\n" + control.stdout[-3000:])
        print(
            f"control: the tests pass on the unmutated copy ({time.perf_counter() - start:.0f} s)"
        )
        for bug, (path, text, replacement, *count) in MUTATIONS.items():
            source = tree / path
            original = source.read_text(encoding="utf-8")
            expected = count[0] if count else 1
            if original.count(text) != expected:
                raise RuntimeError(
                    f"{bug}: the edit of {path} applies {original.count(text)} times, "
                    f"not {expected}"
                )
            source.write_text(original.replace(text, replacement), encoding="utf-8")
            start = time.perf_counter()
            try:
                done = _run_tests(tree, FIRST.get(bug))
            finally:
                source.write_text(original, encoding="utf-8")
            # Exit 1: tests ran and one failed (2+ would be a broken run).
            caught[bug] = _failed_test(done) if done.returncode == 1 else None
            verdict = (
                f"caught by {caught[bug]}" if caught[bug] else f"SURVIVED (exit {done.returncode})"
            )
            print(f"{bug}: {verdict} ({time.perf_counter() - start:.0f} s)", flush=True)
    return caught


def main():
    caught = run()
    survived = [bug for bug, test in caught.items() if not test]
    print(f"{len(caught) - len(survived)} of {len(caught)} bugs caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
