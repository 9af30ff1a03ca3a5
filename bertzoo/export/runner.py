#!/usr/bin/env python3
"""Runs a bertzoo export (ONNX or LiteRT) on strings: its tokenizer, its
model, its answers. Written by `python -m bertzoo export MODEL OUT --format
onnx|litert` as OUT/run.py, beside the model (model.onnx or model.tflite),
its vocabulary (vocab.txt), the tokenizer's character tables
(tokenizer_tables.json) and what the export is (export.json).

Needs Python >= 3.10, numpy and one runtime: onnxruntime for model.onnx,
ai-edge-litert for model.tflite. Neither TensorFlow nor bertzoo.

From the command line (one JSON object per text):

    python OUT/run.py "A first text." "A second one."
    python OUT/run.py --pair "Its second text." "A first text."   # pair tasks
    python OUT/run.py --threads 1 --ids "A text."                 # and the token ids

From Python:

    import sys; sys.path.insert(0, "OUT")
    import run
    model = run.load("OUT")                 # threads=None: the runtime's default
    model(["A first text.", "A second one."])
    # classification: {"probabilities" (B, C), "label_id" (B,), "label" [B]}
    # regression: {"score" (B,)}; embedder: {"embedding" (B, H)}
    # tagging: {"words": [[...]], "tags": [[...]]} (words split on whitespace)
    model.encode(["A text."])               # the model's inputs, numpy int32
    model.run_ids(model.encode(["A text."]))  # the graph's own outputs

The tokenizer is WordPiece (BERT, DistilBERT, ELECTRA, TinyBERT, MiniLM
vocabularies) with the reference the checkpoint was trained with
("google", "hf-python" or "hf-fast"), and gives the same token ids as
bertzoo's tokenizer: the character classes and limits come from bertzoo
(tokenizer_tables.json, export.json); lowercasing, NFD and NFC are Python's own, so
the ids are bertzoo's exactly on the Python (Unicode) version that wrote
the export, and may differ on code points that a later Unicode version
assigns. Other tokenizer kinds (SentencePiece, byte-level BPE) are refused
with one line: feed their token ids to `run_ids` (their vocabulary file is
in OUT). Texts are cut to export.json's max_text_chars, as bertzoo cuts
them (64 characters per token of sequence_length), then packed `[CLS] a [SEP]` (pairs `[CLS] a [SEP] b
[SEP]`, cut longest-first by the reference's rule).

ONNX runs batches sorted by length, each padded to its longest text;
LiteRT (a batch-1 model with any length) runs one text at a time.
"""

import argparse
import bisect
import json
import re
import sys
import unicodedata
from pathlib import Path

import numpy as np

CONFIG_FILE = "export.json"
TABLES_FILE = "tokenizer_tables.json"
# hf-fast normaliser templates: the code point itself; a removed starter.
SELF, BREAK = -1, -2
# What TensorFlow's string split (and so bertzoo) splits words on.
_ASCII_SPACE = re.compile(r"[ \t\n\v\f\r]+")


class RunnerError(Exception):
    """A one-line error: what is wrong, and what works."""


def _char_class(ranges):
    """A Python `re` character class of inclusive code point ranges."""
    if not ranges:
        return "(?!)"  # matches nothing
    parts = (f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)
    return "[" + "".join(parts) + "]"


def _split_words(text):
    return [w for w in _ASCII_SPACE.split(text) if w]


def _special_pattern(tokens):
    """Leftmost, then longest first (Hugging Face's added-token matching)."""
    ordered = sorted(set(tokens), key=lambda t: (-len(t), t))
    return re.compile("|".join(re.escape(t) for t in ordered))


class WordPieceTokenizer:
    """bertzoo's `BertTokenizer` in plain Python: text -> token ids."""

    def __init__(self, directory, section, tables):
        self.reference = section["reference"]
        self.lowercase = bool(section["lowercase"])
        self.strip_accents = bool(section["strip_accents"])
        vocabulary = (directory / section["vocabulary_file"]).read_text(encoding="utf-8")
        tokens = vocabulary.split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        self.vocabulary = {t.rstrip("\r"): i for i, t in enumerate(tokens)}
        self.special = {role: section[f"{role}_token"] for role in ("cls", "sep", "pad", "unk")}
        self.ids = {role: self.vocabulary[token] for role, token in self.special.items()}
        self.max_chars = int(section["max_chars_per_word"])
        specials = []
        if self.reference != "google":  # the Hugging Face references match them in text
            roles = ("cls", "sep", "pad", "unk", "mask")
            specials = [section[f"{r}_token"] for r in roles] + list(section["added_tokens"])
        self.specials = frozenset(specials)
        self.special_pattern = _special_pattern(specials) if specials else None
        if self.reference == "hf-fast":
            self.starts, self.ends, self.which = tables["starts"], tables["ends"], tables["which"]
            values, splits = tables["values"], tables["splits"]
            self.templates = [values[a:b] for a, b in zip(splits, splits[1:])]
            self.ccc = {cp: c for cp, c in tables["ccc"]}
            self.memo = {}
            self.punct = re.compile(f"({_char_class(tables['punct'])})")
            self.space = re.compile(_char_class(tables["whitespace"]))
        else:
            self.classes = {
                name: re.compile(f"({_char_class(tables[name])})")
                for name in ("drop", "space", "cjk", "punct", "mark")
            }

    def tokenize(self, text):
        """One string -> its token ids (no [CLS]/[SEP])."""
        ids = []
        for word in self.words(text):
            ids.extend(self.wordpiece(word))
        return ids

    def words(self, text):
        """The words WordPiece sees (a special token matched in the text is
        one word, itself)."""
        if self.special_pattern is None:
            return self._plain_words(text)
        words, start = [], 0
        for m in self.special_pattern.finditer(text):
            words.extend(self._plain_words(text[start : m.start()]))
            words.append(m.group())
            start = m.end()
        words.extend(self._plain_words(text[start:]))
        return words

    def _plain_words(self, text):
        if not text:
            return []
        if self.reference == "hf-fast":
            text = self.punct.sub(r" \1 ", self._normalize_fast(text))
            return _split_words(self.space.sub(" ", text))
        c = self.classes
        text = c["drop"].sub("", text)
        text = c["space"].sub(" ", text)
        text = c["cjk"].sub(r" \1 ", text)
        if self.reference != "hf-python":
            return self._lower_split(text)
        text = unicodedata.normalize("NFC", text)
        if not self.specials:
            return self._lower_split(text)
        # The Python port keeps a word that is a special token once cleaned whole.
        words = []
        for word in _split_words(text):
            words.extend([word] if word in self.specials else self._lower_split(word))
        return words

    def _lower_split(self, text):
        c = self.classes
        if self.lowercase:
            text = text.lower()
        if self.strip_accents:
            text = c["mark"].sub("", unicodedata.normalize("NFD", text))
        return _split_words(c["punct"].sub(r" \1 ", text))

    def _normalize_fast(self, text):
        """The Rust BertNormalizer as per-code-point templates (bertzoo's
        `hf_fast` tables), then canonical reordering of kept marks."""
        out = []
        for char in text:
            mapped = self.memo.get(char)
            if mapped is None:
                cp = ord(char)
                i = bisect.bisect_right(self.starts, cp) - 1
                template = self.templates[self.which[i]] if cp <= self.ends[i] else [SELF]
                mapped = [cp if x == SELF else x for x in template]
                self.memo[char] = mapped
            out.extend(mapped)
        if self.ccc:
            out = self._reorder(out)
        return "".join(chr(c) for c in out if c != BREAK)

    def _reorder(self, chars):
        out, run = [], []
        for c in [*chars, BREAK]:
            if self.ccc.get(c, 0):
                run.append(c)
                continue
            out.extend(sorted(run, key=self.ccc.__getitem__))
            run = []
            out.append(c)
        return out[:-1]

    def wordpiece(self, word):
        """Greedy longest-match-first; [UNK] for a word over the length limit
        or one the vocabulary cannot cover."""
        vocabulary, unk = self.vocabulary, [self.ids["unk"]]
        if len(word) > self.max_chars:
            return unk
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocabulary:
                    ids.append(vocabulary[piece])
                    break
                end -= 1
            else:
                return unk
            start = end
        return ids


def truncate_longest_first(len_a, len_b, budget, rule):
    """Pair lengths cut to `budget` tokens (bertzoo.preprocessing)."""
    if len_a + len_b <= budget:
        return len_a, len_b
    half_up = (budget + 1) // 2
    if rule == "hf-fast" and len_a <= len_b:
        half_up = budget // 2
    keep_a = min(len_a, max(half_up, budget - len_b))
    return keep_a, min(len_b, budget - keep_a)


def pack(tokenizer, text, pair=None, sequence_length=128, pair_segment_id=1, max_text_chars=None):
    """One text (and its pair) -> (token_ids, segment_ids), unpadded:
    `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, each text first cut to
    `max_text_chars` characters (export.json's: bertzoo's cut, 64 per
    token of sequence_length), as bertzoo packs."""
    cap = 64 * sequence_length if max_text_chars is None else max_text_chars
    a = tokenizer.tokenize(text[:cap])
    cls, sep = tokenizer.ids["cls"], tokenizer.ids["sep"]
    if pair is None:
        ids = [cls, *a[: sequence_length - 2], sep]
        return ids, [0] * len(ids)
    b = tokenizer.tokenize(pair[:cap])
    rule = "hf-fast" if tokenizer.reference == "hf-fast" else "google"
    keep_a, keep_b = truncate_longest_first(len(a), len(b), sequence_length - 3, rule)
    ids = [cls, *a[:keep_a], sep, *b[:keep_b], sep]
    return ids, [0] * (keep_a + 2) + [pair_segment_id] * (keep_b + 1)


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
    return WordPieceTokenizer(directory, section, tables)


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


class Model:
    """An export's model behind its tokenizer (see the module docstring)."""

    def __init__(self, directory, threads=None):
        self.directory = Path(directory)
        try:
            self.config = json.loads((self.directory / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise RunnerError(f"{self.directory} is not a bertzoo export: {e}") from None
        self.task = self.config["task"]
        self.sequence_length = int(self.config["sequence_length"])
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
        return pack(
            self.tokenizer,
            text,
            pair,
            self.sequence_length,
            int(self.config["pair_segment_id"]),
            int(self.config["max_text_chars"]),
        )

    def _packed(self, texts, pairs):
        texts = [_check_text(t, i) for i, t in enumerate(texts)]
        if pairs is None:
            return [self.pack(t) for t in texts]
        pairs = [_check_text(t, i) for i, t in enumerate(pairs)]
        if len(pairs) != len(texts):
            raise RunnerError(f"Got {len(texts)} texts and {len(pairs)} pairs; give one each.")
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
        texts = [texts] if isinstance(texts, str | bytes) else list(texts)
        pairs = [pairs] if isinstance(pairs, str | bytes) else pairs
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
            full = np.zeros(
                (len(order), mask.shape[1], *shape)
                if per_token
                else (len(order), *parts[0][1].shape[1:]),
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
            raise RunnerError(
                "run.py does not answer questions (windows, offsets): run_ids() gives "
                "start_logits and end_logits; bertzoo's SavedModel export (--format "
                "saved_model) answers from strings."
            )
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
        texts = [texts] if isinstance(texts, str | bytes) else list(texts)
        texts = [_check_text(t, i) for i, t in enumerate(texts)]
        length = self.sequence_length
        tok = self.tokenizer
        rows, words_of, starts_of = [], [], []
        for text in texts:
            cap, most = self.config["max_text_chars"], self.config["max_words"]
            words = _split_words(text[:cap])[:most]
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
        row = {"text": text, **{k: _jsonable(v[i]) for k, v in outputs.items()}}
        if encoded is not None:
            mask = encoded["padding_mask"][i].astype(bool)
            row["token_ids"] = encoded["token_ids"][i][mask].tolist()
        print(json.dumps(row, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
