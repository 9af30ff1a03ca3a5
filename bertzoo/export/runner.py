#!/usr/bin/env python3
"""Runs a bertzoo export (ONNX or LiteRT) on strings: its tokenizer, its
model, its answers. Written by `python -m bertzoo export MODEL OUT --format
onnx|litert` as OUT/run.py, beside the model (model.onnx or model.tflite),
its vocabulary (vocab.txt), the tokenizer's character tables
(tokenizer_tables.json), what the export is (export.json) and, for a QA
model, qa_spans.py (bertzoo's windows and answer extraction).

Needs Python >= 3.10, numpy and one runtime: onnxruntime for model.onnx,
ai-edge-litert for model.tflite. Neither TensorFlow nor bertzoo.

From the command line (one JSON object per text, led by the text itself;
a text over 200 characters is shown by its first 200 and an ellipsis, with
its length in "text_characters"):

    python OUT/run.py "A first text." "A second one."
    python OUT/run.py --pair "Its second text." "A first text."   # pair tasks
    python OUT/run.py --pair "Ada lives in Oslo." "Where does Ada live?"  # QA
    python OUT/run.py --threads 1 --ids "A text."                 # and the token ids

From Python:

    import sys; sys.path.insert(0, "OUT")
    import run
    model = run.load("OUT")                 # threads=None: the runtime's default
    model(["A first text.", "A second one."])
    # classification: {"probabilities" (B, C), "label_id" (B,), "label" [B]}
    # regression: {"score" (B,)}; embedder: {"embedding" (B, H)}
    # tagging: {"words": [[...]], "tags": [[...]]} (words split on whitespace)
    # qa, model(questions, contexts): {"answer" [B], "start", "end" (B,):
    #   the answer's characters in its context, -1 for none; "score" (B,)}
    model.encode(["A text."])               # the model's inputs, numpy int32
    model.run_ids(model.encode(["A text."]))  # the graph's own outputs

The tokenizer is WordPiece (BERT, DistilBERT, ELECTRA, TinyBERT, MiniLM
vocabularies) with the reference the checkpoint was trained with
("google", "hf-python" or "hf-fast"), and gives the same token ids (and
byte offsets) as bertzoo's tokenizer: the character classes and limits
come from bertzoo (tokenizer_tables.json, export.json); lowercasing, NFD
and NFC are Python's own, so the ids are bertzoo's exactly on the Python
(Unicode) version that wrote the export, and may differ on code points
that a later Unicode version assigns. Other tokenizer kinds
(SentencePiece, byte-level BPE) are refused with one line: feed their
token ids to `run_ids` (their vocabulary file is in OUT). Texts are cut to
export.json's max_text_chars, as bertzoo cuts them (64 characters per
token of sequence_length), then packed `[CLS] a [SEP]` (pairs `[CLS] a
[SEP] b [SEP]`, cut longest-first by the reference's rule). A QA model's
contexts are cut into windows of export.json's `qa` settings, as
bertzoo's serving model cuts them, and its answers picked by the same rule.

ONNX runs batches sorted by length, each padded to its longest text;
LiteRT (a batch-1 model with any length) runs one text at a time.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

CONFIG_FILE = "export.json"
TABLES_FILE = "tokenizer_tables.json"
MANIFEST_FILE = "bertzoo-manifest.json"  # each file's size and SHA-256, written last
MANIFEST_BYTES = 16 << 20  # the most a manifest may take (bertzoo.io.bounded.CONFIG_BYTES)
MAX_SEQUENCE_LENGTH = 131_072  # the longest a model may be (bertzoo.presets.SIZE_BOUNDS)
# Beside run.py in an export: the tokenizer (bertzoo.tokenizers.python_wordpiece).
TOKENIZER_FILE = "wordpiece.py"
# In a QA export's folder: windows and answers (bertzoo.tasks.qa.spans).
SPANS_FILE = "qa_spans.py"


def _load(path, name):
    """A Python file of the export, by path (neither is on sys.path)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wordpiece():
    """The plain-Python WordPiece tokenizer: the copy an export ships
    beside run.py, else (this file inside bertzoo) bertzoo's own."""
    beside = Path(__file__).with_name(TOKENIZER_FILE)
    if beside.is_file():
        return _load(beside, "export_wordpiece")
    from bertzoo.tokenizers import python_wordpiece

    return python_wordpiece


wordpiece = _wordpiece()


class RunnerError(Exception):
    """A one-line error: what is wrong, and what works."""


def load_tokenizer(directory, section):
    """The tokenizer export.json's `tokenizer` section describes."""
    if section["kind"] != "wordpiece":
        raise RunnerError(
            f"run.py tokenizes WordPiece vocabularies only; this model's tokenizer is "
            f"{section['kind']}: tokenize with it ({section['vocabulary_file']} is here) and "
            "pass the token ids to run_ids()."
        )
    directory = Path(directory)
    tables = json.loads((directory / TABLES_FILE).read_text(encoding="utf-8"))
    tokens = (directory / section["vocabulary_file"]).read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return wordpiece.WordPieceTokenizer([t.rstrip("\r") for t in tokens], section, tables)


def _check_text(text, index):
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RunnerError(
                f"Text {index} is not valid UTF-8 (byte {e.start}); decode it with "
                'errors="replace" first.'
            ) from None
    if not isinstance(text, str):
        raise RunnerError(f"Texts are strings; text {index} is {type(text).__name__}.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RunnerError(
            f"Text {index} holds the lone surrogate {text[e.start]!r} at character {e.start}, "
            "which has no UTF-8 form."
        ) from None
    return text


def _checked(texts, pairs):
    """Texts (a string or a list) and their pairs (or None) as checked
    lists of str, one pair per text."""
    texts = [texts] if isinstance(texts, str | bytes) else list(texts)
    texts = [_check_text(t, i) for i, t in enumerate(texts)]
    if pairs is None:
        return texts, None
    pairs = [pairs] if isinstance(pairs, str | bytes) else list(pairs)
    pairs = [_check_text(t, i) for i, t in enumerate(pairs)]
    if len(pairs) != len(texts):
        raise RunnerError(f"Got {len(texts)} texts and {len(pairs)} pairs; give one each.")
    return texts, pairs


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_folder(directory):
    """Checks the export's files against the manifest the export wrote
    last, before anything is loaded: a file missing, or of another size or
    SHA-256 (a swapped model, a truncated one, an edited export.json), is a
    RunnerError naming it. `BERTZOO_VERIFY=0` skips the check (as it does
    in bertzoo)."""
    if os.environ.get("BERTZOO_VERIFY", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    directory = Path(directory)
    path = directory / MANIFEST_FILE
    if not path.is_file():
        raise RunnerError(
            f"{directory} has no {MANIFEST_FILE}: not a bertzoo export, or one not finished; "
            "export again (BERTZOO_VERIFY=0 runs it unchecked)."
        )
    if path.stat().st_size > MANIFEST_BYTES:
        raise RunnerError(f"{path} is larger than a manifest may be: the export is damaged.")
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        entries = [(name, int(v["size"]), str(v["sha256"])) for name, v in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise RunnerError(f"{path} is damaged ({e}); export again.") from None
    for name, size, sha256 in sorted(entries):
        if name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
            raise RunnerError(f"{path} lists {name!r}, which is not a file of the export.")
        file = directory / name
        if not file.is_file():
            raise RunnerError(f"{file} is missing: the export's manifest lists it; export again.")
        if file.stat().st_size != size or _sha256(file) != sha256:
            raise RunnerError(
                f"{file} differs from the file the export wrote (size or SHA-256 in "
                f"{MANIFEST_FILE}): restore it or export again."
            )


class Model:
    """An export's model behind its tokenizer (see the module docstring).
    Its files are checked against the export's manifest first
    (`check_folder`; `check=False` is for the export's own check of the
    folder it is writing, before its manifest exists)."""

    def __init__(self, directory, threads=None, check=True):
        self.directory = Path(directory)
        if check:
            check_folder(self.directory)
        try:
            self.config = json.loads((self.directory / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise RunnerError(f"{self.directory} is not a bertzoo export: {e}") from None
        self.task = self.config["task"]
        self.sequence_length = self.config.get("sequence_length")
        if (
            isinstance(self.sequence_length, bool)
            or not isinstance(self.sequence_length, int)
            or not 2 <= self.sequence_length <= MAX_SEQUENCE_LENGTH
        ):
            raise RunnerError(
                f"{self.directory / CONFIG_FILE}: sequence_length must be a whole number from 2 "
                f"to {MAX_SEQUENCE_LENGTH:,}, got {self.sequence_length!r}; export again."
            )
        self.label_names = self.config.get("label_names")
        self._tokenizer = None
        self._runtime = _OnnxRuntime if self.config["format"] == "onnx" else _LiteRuntime
        self.session = self._runtime(self.directory / self.config["model_file"], threads)

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.directory, self.config["tokenizer"])
        return self._tokenizer

    # --- strings -> model inputs ---

    def pack(self, text, pair=None):
        """One text (and its pair) -> (token_ids, segment_ids), unpadded."""
        return wordpiece.pack(
            self.tokenizer,
            text,
            pair,
            self.sequence_length,
            int(self.config["pair_segment_id"]),
            int(self.config["max_text_chars"]),
        )

    def _packed(self, texts, pairs):
        texts, pairs = _checked(texts, pairs)
        if pairs is None:
            return [self.pack(t) for t in texts]
        return [self.pack(t, p) for t, p in zip(texts, pairs)]

    def _pad(self, rows):
        width = max(len(ids) for ids, _ in rows)
        pad = self.tokenizer.ids["pad"]
        out = {
            "token_ids": np.full((len(rows), width), pad, np.int32),
            "segment_ids": np.zeros((len(rows), width), np.int32),
            "padding_mask": np.zeros((len(rows), width), np.int32),
        }
        for i, (ids, segments) in enumerate(rows):
            out["token_ids"][i, : len(ids)] = ids
            out["segment_ids"][i, : len(ids)] = segments
            out["padding_mask"][i, : len(ids)] = 1
        return {k: v for k, v in out.items() if k in self.config["inputs"]}

    def encode(self, texts, pairs=None):
        """Texts (and pairs) -> the model's inputs, padded to the longest."""
        rows = self._packed(texts, pairs)
        if not rows:
            return {k: np.zeros((0, 0), np.int32) for k in self.config["inputs"]}
        return self._pad(rows)

    # --- model inputs -> outputs ---

    def run_ids(self, inputs, batch_size=32):
        """The graph's outputs (export.json "outputs") for a dict of int32
        inputs (B, S): rows are run in length-sorted batches, each cut to
        its longest row (one row at a time for LiteRT)."""
        inputs = {k: np.asarray(v, np.int32) for k, v in inputs.items()}
        missing = [k for k in self.config["inputs"] if k not in inputs]
        if missing:
            raise RunnerError(
                f"Missing input(s) {missing}; this model takes {self.config['inputs']}."
            )
        if not len(inputs["padding_mask"]):
            # No rows: one row of padding tells the outputs' shapes.
            one = {k: np.zeros((1, 1), np.int32) for k in self.config["inputs"]}
            return {k: v[:0] for k, v in self.session.run(one).items()}
        mask = inputs["padding_mask"]
        lengths = mask.sum(axis=1)
        order = np.argsort(-lengths, kind="stable")
        step = 1 if self.session.batch_one else max(1, int(batch_size))
        results = {}
        for start in range(0, len(order), step):
            rows = order[start : start + step]
            width = max(1, int(lengths[rows].max()))
            feed = {k: inputs[k][rows, :width] for k in self.config["inputs"]}
            for name, value in self.session.run(feed).items():
                results.setdefault(name, []).append((rows, value, width))
        out = {}
        for name, parts in results.items():
            shape = parts[0][1].shape[2:] if parts[0][1].ndim > 2 else ()
            per_token = name in self.config.get("per_token_outputs", ())
            # Positions past a row's length: bertzoo's fill (its
            # `batching.pad_positions`), so that padding never ranks among
            # the best positions.
            full = np.full(
                (len(order), mask.shape[1], *shape)
                if per_token
                else (len(order), *parts[0][1].shape[1:]),
                np.finfo(np.float32).min / 2 if per_token else 0.0,
                np.float32,
            )
            for rows, value, width in parts:
                if per_token:
                    full[rows, :width] = value
                else:
                    full[rows] = value
            out[name] = full
        return out

    def __call__(self, texts, pairs=None, batch_size=32):
        """Strings in, answers out (see the module docstring)."""
        if self.task == "qa":
            return self._answers(texts, pairs, batch_size)
        if self.task == "tagging":
            return self._tags(texts, batch_size)
        outputs = self.run_ids(self.encode(texts, pairs), batch_size)
        if self.task == "classification":
            probabilities = outputs["probabilities"]
            label_id = probabilities.argmax(-1).astype(np.int32)
            return {
                "probabilities": probabilities,
                "label_id": label_id,
                "label": [self.label_names[i] for i in label_id],
            }
        return outputs

    def _tags(self, texts, batch_size):
        """Words split on whitespace, each tagged at its first token, as
        bertzoo's serving model tags them."""
        texts, _ = _checked(texts, None)
        length = self.sequence_length
        tok = self.tokenizer
        rows, words_of, starts_of = [], [], []
        for text in texts:
            cap, most = self.config["max_text_chars"], self.config["max_words"]
            words = wordpiece.split_words(text[:cap])[:most]
            ids, starts = [tok.ids["cls"]], []
            for word in words:
                pieces = tok.tokenize(word)
                start = len(ids)
                starts.append(start if pieces and start <= length - 2 else -1)
                ids.extend(pieces)
            ids = ids[: length - 1] + [tok.ids["sep"]]
            rows.append((ids, [0] * len(ids)))
            words_of.append(words)
            starts_of.append(starts)
        if not rows:
            return {"words": [], "tags": []}
        best = self.run_ids(self._pad(rows), batch_size)["logits"].argmax(-1)
        names = self.label_names
        fallback = names.index("O") if "O" in names else 0
        tags = [
            [names[best[i, s]] if s >= 0 else names[fallback] for s in starts]
            for i, starts in enumerate(starts_of)
        ]
        return {"words": words_of, "tags": tags}

    def _answers(self, questions, contexts, batch_size):
        """Questions and their contexts -> answers, as bertzoo's serving
        model answers them (`qa_spans.py`: bertzoo's windows and rules)."""
        if contexts is None:
            raise RunnerError("A QA model answers questions about contexts: give one each.")
        questions, contexts = _checked(questions, contexts)

        def logits(features):
            return self.run_ids({k: features[k] for k in self.config["inputs"]}, batch_size)

        settings = {**self.config["qa"], "pair_segment_id": int(self.config["pair_segment_id"])}
        spans = _load_spans(self.directory)
        return spans.answer_questions(
            self.tokenizer, logits, questions, contexts, self.sequence_length, **settings
        )


def _load_spans(directory):
    """The export's qa_spans.py (bertzoo's `bertzoo.tasks.qa.spans`)."""
    return _load(Path(directory) / SPANS_FILE, "export_qa_spans")


class _OnnxRuntime:
    batch_one = False

    def __init__(self, path, threads):
        try:
            import onnxruntime
        except ImportError:
            raise RunnerError("model.onnx runs with onnxruntime: pip install onnxruntime") from None
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        self.names = [o.name for o in self.session.get_outputs()]

    def run(self, feed):
        return dict(zip(self.names, self.session.run(self.names, feed)))


class _LiteRuntime:
    batch_one = True

    def __init__(self, path, threads):
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError:
            raise RunnerError(
                "model.tflite runs with the LiteRT interpreter: pip install ai-edge-litert"
            ) from None
        self.interpreter = Interpreter(model_path=str(path), num_threads=threads or None)
        self.runner = self.interpreter.get_signature_runner()

    def run(self, feed):
        return self.runner(**feed)


def load(directory=None, threads=None):
    """The export in `directory` (default: the folder of this file)."""
    return Model(Path(__file__).resolve().parent if directory is None else directory, threads)


ECHO_CHARACTERS = 200  # the most characters of an input a printed row repeats


def _echo(text):
    """How a printed row names its input: the text, or for a long one its
    start, an ellipsis and its length (a row repeats no 10,000-character
    input)."""
    if len(text) <= ECHO_CHARACTERS:
        return {"text": text}
    return {"text": text[:ECHO_CHARACTERS] + "\u2026", "text_characters": len(text)}


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("texts", nargs="+", metavar="TEXT")
    parser.add_argument(
        "--pair", action="append", default=None, help="a pair's second text (once per TEXT)"
    )
    parser.add_argument("--threads", type=int, default=None, help="runtime threads")
    parser.add_argument("--ids", action="store_true", help="also print the token ids")
    parser.add_argument("--export", default=None, help="the export folder (default: this file's)")
    args = parser.parse_args(argv)
    try:
        model = load(args.export, args.threads)
        outputs = model(args.texts, args.pair)
        encoded = model.encode(args.texts, args.pair) if args.ids else None
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for i, text in enumerate(args.texts):
        row = {**_echo(text), **{k: _jsonable(v[i]) for k, v in outputs.items()}}
        if encoded is not None:
            mask = encoded["padding_mask"][i].astype(bool)
            row["token_ids"] = encoded["token_ids"][i][mask].tolist()
        print(json.dumps(row, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
