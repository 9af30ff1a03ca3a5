"""`python -m bertzoo export MODEL OUT --format saved_model|onnx|litert
[--int8]`: each artefact is loaded in a fresh process by its own `run.py`
(numpy and onnxruntime or ai-edge-litert only: the script checks that
neither TensorFlow, Keras nor bertzoo was imported) and compared with the
Keras model on messy fuzz texts and real sentences.

Tolerances:
- token ids: identical, always (the runner must give the checkpoint's ids);
- float32 artefacts: 1e-5 on probabilities, embeddings and logits. They
  run the same float32 arithmetic in another order; measured: 2e-7
  (MiniLM embeddings), 1e-9 (tiny models). A broken op is off by far more.
- int8: the weights are rounded to 256 levels per channel and the
  activations per call, so outputs move by about 1e-2. Embeddings: cosine
  to float32 (measured on MiniLM, real sentences: mean 0.996, min 0.987;
  fuzz texts: 0.993 / 0.982); classifier: the float32 argmax where the
  float32 top-two margin is clear (> 0.05) and probabilities within 0.05.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bertzoo
from bertzoo import cli
from bertzoo.export import runner, tokenizer_files
from tests.conftest import needs

pytestmark = pytest.mark.backend_independent

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEQUENCE_LENGTH = 24  # shorter than many fuzz texts: truncation is exercised
SIZES = dict(num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=26, max_sequence_length=40)

# Runs in a fresh process from OUT: the export's own run.py, and nothing of
# TensorFlow, Keras or bertzoo.
RUN = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import run
model = run.load(sys.argv[1], threads=1)
job = json.load(open(sys.argv[2], encoding="utf-8"))
out = {}
for name, texts, pairs in job:
    encoded = model.encode(texts, pairs)
    out[name] = {"ids": encoded["token_ids"].tolist(), "segments": encoded.get("segment_ids", np.zeros(0)).tolist()}
    for key, value in model(texts, pairs).items():
        out[name][key] = value.tolist() if isinstance(value, np.ndarray) else value
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "bertzoo"))
assert not heavy, heavy
json.dump(out, open(sys.argv[3], "w", encoding="utf-8"))
"""


def _fuzz():
    sys.path.insert(0, str(FIXTURES))
    try:
        import fuzz_text
    finally:
        sys.path.remove(str(FIXTURES))
    return fuzz_text


@pytest.fixture(scope="module")
def texts():
    from bertzoo.data.builtin_corpus import python_docs_corpus

    fuzz = _fuzz()
    real = [s for doc in python_docs_corpus() for s in doc][::40][:200]
    triples = fuzz.fuzz_pairs(60, seed=3)
    return {
        "fuzz": fuzz.fuzz_texts(200, seed=5),
        "real": real,
        "pairs": ([a for a, _, _ in triples], [b for _, b, _ in triples]),
    }


def _run_export(out, jobs, tmp_path):
    """{job name: outputs} of OUT/run.py in a fresh process."""
    job_file, result = tmp_path / "job.json", tmp_path / "result.json"
    job_file.write_text(json.dumps(jobs), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(out), str(job_file), str(result)],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text(encoding="utf-8"))


def _export(preset, out, *flags):
    assert cli.main(["export", str(preset), str(out), *flags]) == 0
    return out


def _packed(tokenizer, texts, pairs=None, segments=2):
    from bertzoo.preprocessing import BertPreprocessor, segment_inputs

    preprocessor = BertPreprocessor(tokenizer, SEQUENCE_LENGTH, **segment_inputs(segments))
    packed = preprocessor.pack(list(texts) if pairs is None else (list(texts), list(pairs)))
    return {k: v.numpy() for k, v in packed.items()}


def _same_ids(got, packed, key="token_ids"):
    got = np.asarray(got["ids" if key == "token_ids" else "segments"])
    width = got.shape[1]
    assert np.array_equal(got, packed[key][:, :width])
    assert not packed["padding_mask"][:, width:].any()


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# === The tokenizer of run.py ===


def _runner_tokenizer(tokenizer, directory):
    tokenizer._write_vocabulary(directory / tokenizer.vocabulary_file)
    tables = tokenizer_files.tokenizer_tables(tokenizer)
    (directory / tokenizer_files.TABLES_FILE).write_text(json.dumps(tables), encoding="utf-8")
    return runner.load_tokenizer(directory, tokenizer_files.tokenizer_section(tokenizer))


@pytest.mark.parametrize(
    "settings",
    [
        dict(reference="google"),
        dict(reference="google", lowercase=False),
        dict(reference="hf-python", added_tokens=["[unused5]"]),
        dict(reference="hf-fast"),
        dict(reference="hf-fast", lowercase=False),
    ],
    ids=lambda s: "-".join(f"{v}" for v in s.values()),
)
def test_runner_tokenizer_gives_bertzoos_ids(settings, minilm_dir, texts, tmp_path):
    tokenizer = bertzoo.BertTokenizer(str(minilm_dir / "vocab.txt"), **settings)
    mine = _runner_tokenizer(tokenizer, tmp_path)
    fuzz = texts["fuzz"] + ["[unused5] Straße ΟΔΟΣ. [SEP][MASK]x 東京", "ΟΔΟΣ.Χ a[\u200bSEP] İΣ"]
    expected = tokenizer.tokenize_ids(fuzz).to_list()
    assert [mine.tokenize(t) for t in fuzz] == expected
    # The same class built in memory: what TextEmbedder's int8 path packs with.
    assert [tokenizer.python_tokenizer().tokenize(t) for t in fuzz] == expected
    # With each token's byte span (QA answers are cut out of contexts by them).
    ids, starts, ends = (x.to_list() for x in tokenizer.tokenize_with_offsets(fuzz))
    assert [mine.tokenize_with_offsets(t) for t in fuzz] == list(zip(ids, starts, ends))
    # Packing, pairs cut longest-first by the reference's rule.
    a, b = texts["pairs"]
    packed = _packed(tokenizer, a, b)
    for i, (x, y) in enumerate(zip(a, b)):
        ids, segments = runner.wordpiece.pack(mine, x, y, SEQUENCE_LENGTH)
        n = len(ids)
        assert (
            ids == packed["token_ids"][i, :n].tolist() and packed["padding_mask"][i, n:].sum() == 0
        )
        assert segments == packed["segment_ids"][i, :n].tolist()


def test_runner_refuses_other_tokenizer_kinds_in_one_line(tmp_path):
    with pytest.raises(runner.RunnerError) as error:
        runner.load_tokenizer(
            tmp_path, {"kind": "sentencepiece", "vocabulary_file": "spiece.model"}
        )
    message = str(error.value)
    assert "WordPiece" in message and "sentencepiece" in message and "run_ids" in message
    assert "\n" not in message


# === Bad requests: one line, nothing written ===


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--format", "saved_model", "--int8"], "--int8 needs --format onnx or litert"),
        (["--format", "onnx", "--doc-stride", "64"], "--doc-stride apply to QA models only"),
    ],
)
def test_bad_combinations_are_refused_before_anything_is_written(
    flags, says, minilm_dir, tmp_path, capsys
):
    out = tmp_path / "out"
    assert cli.main(["export", str(minilm_dir), str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert not out.exists()


def test_missing_packages_and_models_are_refused(minilm_dir, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "onnxruntime" else real(n, *a)
    )
    assert cli.main(["export", str(minilm_dir), str(tmp_path / "o"), "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert "onnxruntime" in err and 'pip install ".[export]"' in err and err.count("\n") == 1
    monkeypatch.undo()
    assert cli.main(["export", str(tmp_path / "nothing"), str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "is not a directory; MODEL is a model directory" in err and err.count("\n") == 1
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert cli.main(["export", str(minilm_dir), str(mine)]) == 2
    assert "not a bertzoo export" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


# === A fine-tuned classifier ===


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, minilm_dir):
    """A small classifier with MiniLM's vocabulary (google reference), saved
    as a task preset. Its weights are drawn wider than an initialiser
    would (std 0.2), so that texts get classes by clear margins, as a
    trained model's do, and an int8 artefact is held to them."""
    from tests.conftest import seed_everything

    seed_everything()
    tokenizer = bertzoo.BertTokenizer(str(minilm_dir / "vocab.txt"), reference="google")
    backbone = bertzoo.BertBackbone(vocabulary_size=tokenizer.vocabulary_size, **SIZES)
    model = bertzoo.BertClassifier(backbone, 3, label_names=["bad", "meh", "good"])
    rng = np.random.default_rng(0)
    for variable in model.weights:
        if len(variable.shape) == 2:
            variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    directory = tmp_path_factory.mktemp("classifier") / "preset"
    model.save_to_preset(directory, tokenizer=tokenizer)
    return directory, model, tokenizer


@pytest.mark.slow
@pytest.mark.parametrize("format, int8", [("onnx", False), ("onnx", True), ("litert", True)])
def test_classifier_export_matches_keras(format, int8, classifier, texts, tmp_path, capsys):
    needs("onnxruntime" if format == "onnx" else "ai_edge_litert")
    needs("tf2onnx")
    preset, model, tokenizer = classifier
    flags = ["--format", format, "--sequence-length", str(SEQUENCE_LENGTH)] + ["--int8"] * int8
    out = _export(preset, tmp_path / "export", *flags)
    description = json.loads((out / "export.json").read_text(encoding="utf-8"))
    assert description["task"] == "classification" and description["int8"] == int8
    assert description["check"]["ids_checked"]
    fuzz, (a, b) = texts["fuzz"], texts["pairs"]
    got = _run_export(out, [("fuzz", fuzz, None), ("pairs", a, b), ("none", [], None)], tmp_path)
    assert got["none"]["label"] == [] and got["none"]["probabilities"] == []
    if format == "onnx" and not int8:
        # Its command line: a row per text, a long input shown by its start.
        long_text = "좋은 영화 " * 2000
        capsys.readouterr()
        assert runner.main([long_text, "a short one", "--export", str(out)]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert rows[0]["text"] == long_text[: runner.ECHO_CHARACTERS] + "\u2026"
        assert rows[0]["text_characters"] == len(long_text) == 12000
        assert rows[1]["text"] == "a short one" and "text_characters" not in rows[1]
        assert all(row["label"] in model.label_names for row in rows)
        _run_py_checks_its_folder(out, tmp_path, capsys)
    for name, packed in (("fuzz", _packed(tokenizer, fuzz)), ("pairs", _packed(tokenizer, a, b))):
        _same_ids(got[name], packed)
        _same_ids(got[name], packed, "segment_ids")
        expected = _softmax(np.asarray(model(packed)))
        probabilities = np.asarray(got[name]["probabilities"])
        assert got[name]["label"] == [model.label_names[i] for i in got[name]["label_id"]]
        if not int8:
            np.testing.assert_allclose(probabilities, expected, atol=1e-5)
            continue
        assert np.abs(probabilities - expected).max() < 0.05
        top2 = np.sort(expected, -1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 0.05
        assert clear.sum() > 20
        assert np.array_equal(probabilities[clear].argmax(-1), expected[clear].argmax(-1))


def _run_py_checks_its_folder(out, tmp_path, capsys):
    """run.py checks the export's files against its manifest before it
    loads anything: a swapped or truncated model, or an edited
    export.json, is one line naming the file (before, a swapped model.onnx
    was served silently, and a truncated one or an edited sequence_length
    gave a raw runtime traceback)."""

    def damaged(edit):
        copy = tmp_path / f"damaged_{len(list(tmp_path.glob('damaged_*')))}"
        shutil.copytree(out, copy)
        edit(copy)
        capsys.readouterr()
        assert runner.main(["a text", "--export", str(copy)]) == 2
        return capsys.readouterr().err

    def edit_length(folder):
        config = json.loads((folder / "export.json").read_text(encoding="utf-8"))
        config["sequence_length"] = 4096
        (folder / "export.json").write_text(json.dumps(config), encoding="utf-8")

    model = out / "model.onnx"
    for edit, name in (
        (edit_length, "export.json"),
        (
            lambda f: (f / "model.onnx").write_bytes(
                model.read_bytes()[: model.stat().st_size // 2]
            ),
            "model.onnx",
        ),
        (
            lambda f: (f / "model.onnx").write_bytes(model.read_bytes()[:-8] + b"\0" * 8),
            "model.onnx",
        ),
        (lambda f: (f / "vocab.txt").unlink(), "vocab.txt"),
        (lambda f: (f / "bertzoo-manifest.json").unlink(), "bertzoo-manifest.json"),
    ):
        err = damaged(edit)
        assert err.count("\n") == 1 and err.startswith("error: ") and name in err, err
        assert "Traceback" not in err
    # A hostile folder reseals its manifest: the length is bounded before use.
    from bertzoo.io.manifest import describe_files

    hostile = tmp_path / "hostile"
    shutil.copytree(out, hostile)
    config = json.loads((hostile / "export.json").read_text(encoding="utf-8"))
    config["sequence_length"] = 10**9
    (hostile / "export.json").write_text(json.dumps(config), encoding="utf-8")
    manifest = json.loads((hostile / "bertzoo-manifest.json").read_text())
    manifest["files"].update(describe_files(hostile, ["export.json"]))
    (hostile / "bertzoo-manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(runner.RunnerError, match="sequence_length must be a whole number from 2"):
        runner.load(hostile)


def _serving_tags(model, tokenizer, sentences, length):
    """What bertzoo's serving graph tags (`bertzoo.tasks.tagging`), eagerly:
    words split on whitespace, each tagged at its first token."""
    import tensorflow as tf

    from bertzoo.tasks.tagging import features
    from bertzoo.tokenizers.base import cut_texts, text_cap

    text = cut_texts(tf.constant(sentences), text_cap(length))
    words = tf.strings.split(text)[:, : features.max_words(length)]
    encoded = features.encode_words(tokenizer, words, length)
    best = np.asarray(model({k: encoded[k] for k in model.input})).argmax(-1)
    names = model.label_names
    return [
        [names[best[i, s]] if s >= 0 else "O" for s in starts[: len(row)]]
        for i, (row, starts) in enumerate(zip(words.to_list(), encoded["word_starts"].numpy()))
    ], [[w.decode() for w in row] for row in words.to_list()]


@pytest.mark.slow
def test_tagger_export_tags_words_as_the_serving_model(classifier, texts, tmp_path):
    needs("onnxruntime")
    needs("tf2onnx")
    _, _, tokenizer = classifier
    backbone = bertzoo.BertBackbone(vocabulary_size=tokenizer.vocabulary_size, **SIZES)
    model = bertzoo.BertTokenClassifier(backbone, 3, label_names=["O", "B-X", "I-X"])
    preset = tmp_path / "tagger"
    model.save_to_preset(preset, tokenizer=tokenizer)
    flags = ["--format", "onnx", "--sequence-length", str(SEQUENCE_LENGTH)]
    out = _export(preset, tmp_path / "export", *flags)
    sentences = texts["fuzz"][:80] + texts["real"][:40]
    got = _run_export(out, [("tags", sentences, None)], tmp_path)["tags"]
    tags, words = _serving_tags(model, tokenizer, sentences, SEQUENCE_LENGTH)
    assert got["words"] == words and got["tags"] == tags


# === Question answering ===

# Short windows with a small stride, so that contexts take several windows
# and the max-context rule decides.
QA_SETTINGS = dict(sequence_length=SEQUENCE_LENGTH, doc_stride=5, max_query_length=8)


def _qa_examples(texts):
    """Messy (question, context) pairs: fuzz text, real sentences, empty
    ones, a context of many windows, CJK and emoji."""
    fuzz, real = texts["fuzz"], texts["real"]
    questions = fuzz[:60] + real[:20] + ["", "Where?", "東京 😀 is where?", fuzz[3]]
    contexts = fuzz[60:120] + [" ".join(real[i : i + 4]) for i in range(20)]
    contexts += ["a context", "", "東京タワー 😀 in Tokyo, Japan.", " ".join(real[:12])]
    return questions, contexts


def test_runner_windows_are_bertzoos(classifier, texts):
    """run.py's windows (`qa_spans.py`, from its own tokens and byte
    offsets) are the features of bertzoo's `encode_qa`, key for key."""
    from bertzoo.tasks.qa import spans
    from bertzoo.tasks.qa.features import encode_qa

    _, _, tokenizer = classifier
    questions, contexts = _qa_examples(texts)
    sizes = (SEQUENCE_LENGTH, 5, 8)
    expected = {k: v.numpy() for k, v in encode_qa(tokenizer, questions, contexts, *sizes).items()}
    ids = {r: getattr(tokenizer, f"{r}_token_id") for r in ("cls", "sep", "pad")}
    question_ids = tokenizer.tokenize_ids([q[: 64 * 8] for q in questions]).to_list()
    context_tokens = (x.to_list() for x in tokenizer.tokenize_with_offsets(contexts))
    got = spans.encode_windows(list(zip(question_ids, *context_tokens)), *sizes, ids)
    assert len(got["token_ids"]) > len(questions) + 40  # many contexts take several windows
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


@pytest.mark.slow
def test_qa_export_answers_as_the_serving_model(classifier, texts, tmp_path):
    """A QA model exported to LiteRT (float32) answers messy questions
    about messy contexts through run.py in a fresh process as bertzoo's
    serving model (the SavedModel's graph) answers them: the same answer
    texts, their character spans at the serving model's byte offsets, and
    the scores within 1e-4 (float32 logits in another order: 1e-6)."""
    needs("ai_edge_litert")
    from bertzoo.serving import serving_model_from_preset
    from tests.conftest import seed_everything

    seed_everything()
    _, _, tokenizer = classifier
    backbone = bertzoo.BertBackbone(vocabulary_size=tokenizer.vocabulary_size, **SIZES)
    model = bertzoo.BertSpanQA(backbone)
    rng = np.random.default_rng(1)
    for variable in model.weights:
        if len(variable.shape) == 2:  # clear margins between spans, as a trained model's
            variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    preset = tmp_path / "qa"
    model.save_to_preset(preset, tokenizer=tokenizer)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in QA_SETTINGS.items()]
    out = _export(preset, tmp_path / "export", "--format", "litert", *flags)
    description = json.loads((out / "export.json").read_text(encoding="utf-8"))
    assert description["qa"]["doc_stride"] == 5 and (out / "qa_spans.py").is_file()
    questions, contexts = _qa_examples(texts)
    got = _run_export(out, [("qa", questions, contexts)], tmp_path)["qa"]
    serving = serving_model_from_preset(preset, **QA_SETTINGS)
    # Traced at load; every later batch (any size, any length) reuses it.
    assert serving._serve_function().experimental_get_tracing_count() == 1
    serving.answer(question=questions[0], context=contexts[0])
    expected = serving.answer(question=questions, context=contexts)
    assert serving._serve_function().experimental_get_tracing_count() == 1
    answers = [a.decode("utf-8") for a in expected["answer"]]
    assert got["answer"] == answers and sum(a != "" for a in answers) > 60
    for i, (context, start, end) in enumerate(zip(contexts, got["start"], got["end"])):
        raw = context.encode("utf-8")
        byte_start = len(context[:start].encode("utf-8")) if start >= 0 else -1
        byte_end = len(context[:end].encode("utf-8")) if end >= 0 else -1
        assert (byte_start, byte_end) == (expected["start"][i], expected["end"][i]), i
        assert start < 0 or context[start:end] == answers[i] == raw[byte_start:byte_end].decode()
    # No valid span (no context tokens): -inf here, float32's lowest there.
    scores, none = np.asarray(got["score"], np.float64), expected["score"] < -1e38
    np.testing.assert_allclose(scores[~none], expected["score"][~none], atol=1e-4)
    assert none.sum() >= 2 and np.all(np.isneginf(scores[none]))


# === Embedders ===


@pytest.fixture(scope="module")
def small_embedder(tmp_path_factory, minilm_dir):
    """A bertzoo backbone preset with MiniLM's tokenizer (hf-fast): exported
    as a TextEmbedder (mean pooling, normalised)."""
    from tests.conftest import seed_everything

    seed_everything()
    tokenizer = bertzoo.BertTokenizer.from_preset(minilm_dir)
    backbone = bertzoo.BertBackbone(vocabulary_size=tokenizer.vocabulary_size, **SIZES)
    directory = tmp_path_factory.mktemp("embedder") / "preset"
    backbone.save_to_preset(directory, preset_info={"tokenizer": tokenizer.preset_section()})
    tokenizer.save_to_preset(directory)
    return directory, bertzoo.TextEmbedder.from_preset(directory)


@pytest.mark.slow
def test_embedder_saved_model_takes_strings(small_embedder, texts, tmp_path):
    import tensorflow as tf

    preset, embedder = small_embedder
    out = _export(preset, tmp_path / "export")
    assert json.loads((out / "serving.json").read_text())["outputs"] == ["embedding"]
    serve = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    sample = texts["fuzz"][:50] + texts["real"][:20]
    got = serve(text=tf.constant(sample))["embedding"].numpy()
    np.testing.assert_allclose(got, embedder.embed(sample), atol=1e-5)


@pytest.mark.slow
def test_embedder_litert_export_matches_keras(small_embedder, texts, tmp_path):
    needs("ai_edge_litert")
    preset, embedder = small_embedder
    out = _export(preset, tmp_path / "export", "--format", "litert")
    sample = texts["fuzz"][:100] + texts["real"][:50]
    got = _run_export(out, [("embed", sample, None)], tmp_path)["embed"]
    _same_ids(got, _packed_full(embedder, sample))
    np.testing.assert_allclose(np.asarray(got["embedding"]), embedder.embed(sample), atol=1e-5)


def _packed_full(embedder, texts):
    return {k: v.numpy() for k, v in embedder.preprocessor.pack(list(texts)).items()}


@pytest.mark.slow
def test_minilm_int8_onnx_export_keeps_the_embeddings(minilm_dir, texts, tmp_path):
    """The float32 path is held to 1e-5 above (same converter, same runner);
    here the real checkpoint's int8 export, on real sentences and fuzz."""
    needs("onnxruntime")
    needs("tf2onnx")
    out = _export(minilm_dir, tmp_path / "export", "--format", "onnx", "--int8")
    description = json.loads((out / "export.json").read_text(encoding="utf-8"))
    assert description["tokenizer"]["reference"] == "hf-fast" and description["int8"]
    assert (description["pooling"], description["normalize"]) == ("mean", True)
    sample = {"real": texts["real"][:120], "fuzz": texts["fuzz"][:120]}
    got = _run_export(out, [(k, v, None) for k, v in sample.items()], tmp_path)
    embedder = bertzoo.TextEmbedder.from_preset(minilm_dir)
    _same_ids(got["fuzz"], _packed_full(embedder, sample["fuzz"]))
    for name, (mean, low) in {"real": (0.995, 0.98), "fuzz": (0.99, 0.975)}.items():
        vectors, expected = np.asarray(got[name]["embedding"]), embedder.embed(sample[name])
        cosine = (vectors * expected).sum(-1) / np.linalg.norm(vectors, axis=-1)
        assert cosine.mean() >= mean and cosine.min() >= low, (name, cosine.mean(), cosine.min())
