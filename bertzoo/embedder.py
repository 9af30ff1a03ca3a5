"""Strings in, sentence embeddings out."""

import json
import logging
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bertzoo import batching
from bertzoo import packing as packing_lib
from bertzoo import presets as preset_lib
from bertzoo.errors import InputError, InputTypeError
from bertzoo.input_checks import check_model_inputs
from bertzoo.io.jsonfile import load_json
from bertzoo.io.publish import publish_directory
from bertzoo.layers.pooling import POOLING_MODES, TokenPooling
from bertzoo.loader_registry import preset_loader
from bertzoo.models import litert
from bertzoo.models.backbone import BertBackbone, check_predict_inputs
from bertzoo.models.int8 import (
    SINGLE_OUTPUT,
    QuantizeMethods,
    predict_litert,
    saved_graph,
    use_saved_graph,
)
from bertzoo.preprocessing import BertPreprocessor
from bertzoo.tokenizers import python_wordpiece
from bertzoo.tokenizers.base import (
    VOCABULARY_FILES,
    check_utf8,
    count_long_texts,
    cut_message,
    to_string_tensor,
)

logger = logging.getLogger(__name__)

_ST_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
}


# transformers' "no limit" `model_max_length` (int(1e30)): any length above
# this is no length at all.
_NO_LENGTH = 1_000_000


def _pooling_mode(config):
    """The pooling modes of a sentence-transformers Pooling config: the
    `pooling_mode_*` flags of sentence-transformers before 6, or its
    `pooling_mode` (a name or a list of them)."""
    modes = [mode for key, mode in _ST_POOLING_KEYS.items() if config.get(key)]
    modes += [
        k
        for k, v in config.items()
        if k.startswith("pooling_mode_") and v and k not in _ST_POOLING_KEYS
    ]
    named = config.get("pooling_mode")
    if named is not None:
        modes += [named] if isinstance(named, str) else list(named)
    return modes


def sentence_transformers_settings(directory):
    """Pooling, normalisation and maximum length recorded by a
    sentence-transformers model directory (modules.json and friends); {} if
    the directory is not one. Both layouts: before version 6 (pooling flags
    `pooling_mode_mean_tokens`..., the length in sentence_bert_config.json's
    `max_seq_length`) and from 6 on (`pooling_mode`, the length in
    tokenizer_config.json's `model_max_length`)."""
    directory = Path(directory)
    modules_file = directory / "modules.json"
    if not modules_file.is_file():
        return {}
    try:
        modules = load_json(modules_file)
        settings = {"normalize": any(m.get("type", "").endswith(".Normalize") for m in modules)}
        for module in modules:
            if module.get("type", "").endswith(".Pooling"):
                config = json.loads((directory / module["path"] / "config.json").read_text("utf-8"))
                modes = _pooling_mode(config)
                if len(modes) != 1 or modes[0] not in POOLING_MODES:
                    raise preset_lib.PresetError(
                        f"{directory}: pooling {modes} is not supported; bertzoo "
                        f"pools with exactly one of {', '.join(POOLING_MODES)}."
                    )
                settings["pooling"] = modes[0]
        st_config = directory / "sentence_bert_config.json"
        if st_config.is_file():
            st = json.loads(st_config.read_text("utf-8"))
            if st.get("max_seq_length"):
                settings["sequence_length"] = int(st["max_seq_length"])
            # sentence-transformers' do_lower_case makes its tokenizer
            # lowercase (it puts the Rust Lowercase normaliser first when the
            # tokenizer does not lowercase already); accents stay as they were.
            settings["lowercase"] = bool(st.get("do_lower_case", False))
        tokenizer_config = directory / "tokenizer_config.json"
        if "sequence_length" not in settings and tokenizer_config.is_file():
            # sentence-transformers 6 keeps the length in the tokenizer's.
            length = json.loads(tokenizer_config.read_text("utf-8")).get("model_max_length")
            if isinstance(length, int) and 0 < length < _NO_LENGTH:
                settings["tokenizer_length"] = length
    except (OSError, ValueError, KeyError, AttributeError) as e:
        if isinstance(e, preset_lib.PresetError):
            raise
        raise preset_lib.PresetError(
            f"{directory}: unreadable sentence-transformers files: {e}"
        ) from e
    return settings


def _embedder_section(directory):
    """The `embedder` section of a bertzoo preset directory (see
    `TextEmbedder.save_to_preset`), checked; {} when it has none."""
    section = preset_lib.read_section(directory, "embedder")
    pooling = section.get("pooling")
    if pooling is not None and pooling not in POOLING_MODES:
        raise preset_lib.PresetError(
            f"{Path(directory) / preset_lib.CONFIG_FILE}: embedder.pooling must be one of "
            f"{', '.join(POOLING_MODES)}, got {pooling!r}."
        )
    return section


def _encodes(text):
    """A str with a UTF-8 form (no lone surrogate)."""
    if type(text) is not str:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_text(x):
    if isinstance(x, tuple):
        return len(x) > 0 and all(_is_text(s) for s in x)
    if isinstance(x, tf.Tensor):
        return x.dtype == tf.string
    if isinstance(x, str | bytes):
        return True
    if isinstance(x, list | np.ndarray):
        array = np.asarray(x, dtype=object)
        return array.size > 0 and all(isinstance(v, str | bytes) for v in array.flat)
    return False


def _is_empty_text(x):
    """An empty batch of texts: [], an empty array, or a tuple of those."""
    if isinstance(x, tuple):
        return len(x) > 0 and all(_is_empty_text(s) for s in x)
    if isinstance(x, tf.Tensor):
        return x.dtype == tf.string and x.shape.rank == 1 and x.shape[0] == 0
    if isinstance(x, list | np.ndarray):
        return np.asarray(x, dtype=object).size == 0
    return False


# === Input checks ===

_TEXTS = (
    "a string, a list of strings, or a tuple (texts_a, texts_b) of two equally long lists for pairs"
)


def _is_preprocessed(x):
    """Inputs Keras' predict takes as they are: the backbone's dict of ids,
    a dataset, a generator."""
    if isinstance(x, dict | tf.data.Dataset | keras.utils.PyDataset):
        return True
    return hasattr(x, "__next__")  # generators and iterators


def _check_texts(x):
    """Everything else a TextEmbedder with a preprocessor is given must be
    text: one clear TypeError (naming the element) instead of a traceback
    deep in TensorFlow."""
    if isinstance(x, tuple):
        if not 1 <= len(x) <= 2:
            raise InputTypeError(f"TextEmbedder takes {_TEXTS}; got a tuple of {len(x)}.")
        if all(isinstance(s, str | bytes) for s in x):
            return
        for s, which in zip(x, ("texts_a", "texts_b")):
            if isinstance(s, str | bytes):
                raise InputTypeError(
                    f"TextEmbedder takes {_TEXTS}; got a tuple mixing single strings and batches."
                )
            _check_batch(s, which)
        return
    if isinstance(x, str | bytes):
        return
    _check_batch(x, "texts")


def _check_batch(x, which):
    if isinstance(x, tf.Tensor):
        if x.dtype != tf.string:
            raise InputTypeError(f"TextEmbedder takes {_TEXTS}; got a {x.dtype.name} tensor.")
        return
    if not isinstance(x, list | np.ndarray):
        raise InputTypeError(f"TextEmbedder takes {_TEXTS}; got {type(x).__name__}: {x!r:.80}.")
    for i, text in enumerate(np.asarray(x, dtype=object).flat):
        if not isinstance(text, str | bytes):
            raise InputTypeError(
                f"TextEmbedder takes {_TEXTS}; element {i} of {which} is "
                f"{type(text).__name__} ({text!r:.80}), not a string."
            )


# === End of input checks ===


def _stack_rows(rows, width):
    """Unpadded rows (dicts of int32 (1, S_i) arrays) -> a dict of
    (rows, width) arrays, right-padded with 0."""
    stacked = {k: np.zeros((len(rows), width), np.int32) for k in rows[0]}
    for i, row in enumerate(rows):
        for k, v in row.items():
            stacked[k][i, : v.shape[1]] = v[0]
    return stacked


class TextEmbedder(QuantizeMethods, keras.Model):
    """A backbone plus pooling: token ids -> one vector per text, and with a
    preprocessor attached, strings -> vectors via `predict` / `embed`.

    Args:
        backbone: a `BertBackbone`.
        preprocessor: a `BertPreprocessor` (optional: without it the model
            takes the preprocessed dict, as the backbone does).
        pooling: "cls", "mean" or "max" over the real tokens.
        normalize: L2-normalise the embeddings.

    `quantize("int8")` switches the embedder to its fastest int8 CPU path:
    a LiteRT graph with int8 weights, where the backend is TensorFlow and
    ai-edge-litert is installed (`bertzoo.models.int8`); `embed` and
    `predict` run it. `save_to_preset` writes the backbone, the vocabulary
    and the pooling settings, and that graph when there is one.

    Example:
    >>> embedder = TextEmbedder.from_preset(path_to_all_minilm_l6_v2)
    >>> embedder.embed(["A sentence.", "한국어 문장."]).shape
    (2, 384)
    """

    int8_graph_owner = "embedder"

    def __init__(self, backbone, preprocessor=None, pooling="mean", normalize=True, **kwargs):
        inputs = {k: keras.Input(shape=(None,), dtype="int32", name=k) for k in backbone.input}
        sequence = backbone(inputs)["sequence_output"]
        pool = TokenPooling(pooling, normalize, name="pooling")
        outputs = pool(sequence, inputs["padding_mask"])
        super().__init__(inputs, outputs, **kwargs)
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.pooling = pooling
        self.normalize = bool(normalize)

    @classmethod
    def from_preset(
        cls,
        preset,
        pooling=None,
        normalize=None,
        sequence_length=None,
        vocabulary=None,
        load_weights=True,
        dtype=None,
        warm=True,
        **kwargs,
    ):
        """Backbone and preprocessor from a preset directory (bertzoo or
        Hugging Face format). Pooling, normalisation and sequence length
        default to what the directory records (the `embedder` section
        `save_to_preset` writes, or a sentence-transformers directory's
        files), else mean pooling, normalised, and the backbone's maximum
        length. An int8 preset loads int8 (a LiteRT-int8 one with its
        graph, not converted again, under any backend, unless pooling,
        normalize, sequence_length or dtype is given: then the float32
        model runs, and a warning says so). `dtype`
        (e.g. "mixed_bfloat16") is the backbone's dtype policy; the pooled
        embeddings stay float32. `warm` (TensorFlow): trace the forward
        pass here, so that no call waits on tracing (about 1 s);
        `warm=False` loads faster where the embedder is only saved,
        converted or inspected."""
        # Model, tokenizer and settings from one published version of the
        # directory, even while a run publishes the next one there.
        with preset_lib.pinned(preset) as source:
            backbone, preprocessor, settings = cls._parts_from_preset(
                source, preset, sequence_length, vocabulary, load_weights, dtype
            )
            embedder = cls(
                backbone,
                preprocessor,
                pooling=pooling or settings.get("pooling", "mean"),
                normalize=settings.get("normalize", True) if normalize is None else normalize,
                **kwargs,
            )
            if load_weights:
                given = (pooling, normalize, sequence_length, dtype) != (None,) * 4
                changed = "pooling, normalize, sequence_length or dtype" if given else None
                use_saved_graph(embedder, preset_loader().read_int8_graph(source), preset, changed)
                if litert.attached_runner(embedder) is None:
                    embedder._warm(trace=warm)
        return embedder

    @staticmethod
    def _parts_from_preset(source, preset, sequence_length, vocabulary, load_weights, dtype):
        """(backbone, preprocessor, sentence-transformers settings) read from
        `source` (the pinned view of `preset`)."""
        overrides = {} if dtype is None else {"dtype": dtype}
        # The loader's own load: a LiteRT-int8 graph in the preset is the
        # embedder's to take (`from_preset`), not its backbone's.
        backbone = preset_loader().load_backbone(
            BertBackbone, source, load_weights=load_weights, overrides=overrides
        )
        settings = {}
        if preset_lib.builtin_name(preset) is None:
            settings = {
                **sentence_transformers_settings(source),
                **_embedder_section(source),
            }
        length = settings.get("sequence_length") if sequence_length is None else sequence_length
        if length is None and "tokenizer_length" in settings:
            # A tokenizer's limit may exceed the positions (RoBERTa's 514).
            positions = preset_lib.max_input_length(backbone.get_config())
            length = min(settings["tokenizer_length"], positions)
        preprocessor = BertPreprocessor.from_preset(
            source, sequence_length=length, vocabulary=vocabulary
        )
        tokenizer = preprocessor.tokenizer
        if settings.get("lowercase") and not tokenizer.lowercase:
            preprocessor = BertPreprocessor.from_preset(
                source,
                sequence_length=length,
                vocabulary=vocabulary,
                lowercase=True,
                strip_accents=tokenizer.strip_accents,
            )
        return backbone, preprocessor, settings

    def _litert_ready(self):
        self._warm()

    def _warm(self, trace=True):
        """At load (`from_preset`, `quantize("int8")`): the tokenizer's
        plain-Python form where it has one (WordPiece: lists of texts are
        packed without a TensorFlow call, `_python_rows`) and, on
        TensorFlow, a first run of what a call on a list of texts runs, so
        that no later call waits on tracing: the forward pass (one graph for
        every batch shape on a CPU, `batching.uses_xla`; about 1 s for
        MiniLM on 2 cores), and the tokenizer's graph where there is no
        Python form (`trace=False`: neither). Pairs, arrays and string
        tensors pack in the graph, traced on their first call."""
        python = getattr(getattr(self.preprocessor, "tokenizer", None), "python_tokenizer", None)
        self.__dict__["_python_tokenizer"] = python() if python is not None else None
        if trace and self.preprocessor is not None and keras.backend.backend() == "tensorflow":
            if python is None:  # lists of texts are packed by the graph
                self._pack_function(1)(tf.constant([""]))
            self.embed([""])

    def save_to_preset(self, preset_dir):
        """Writes the backbone (see `BertBackbone.save_to_preset`; int8 after
        `quantize("int8", runtime="keras")`), the preprocessor's vocabulary
        and tokenizer settings, an `embedder` section (pooling, normalize,
        sequence_length) and, after `quantize("int8")` on LiteRT, its int8
        graph (embedder_int8.tflite, `bertzoo.models.int8`) to `preset_dir`,
        published as one unit with a checksum manifest.
        `TextEmbedder.from_preset(preset_dir)` rebuilds the same embedder."""
        section = {"pooling": self.pooling, "normalize": self.normalize}
        info = dict(self.backbone.preset_info)
        replaces = preset_lib.MODEL_FILES
        if self.preprocessor is not None:
            section["sequence_length"] = int(self.preprocessor.sequence_length)
            replaces += VOCABULARY_FILES
        with publish_directory(preset_dir, "preset", replaces=replaces) as staging:
            if self.preprocessor is not None:
                tokenizer = self.preprocessor.tokenizer
                tokenizer.save_to_preset(staging)
                info["tokenizer"] = tokenizer.preset_section()
            preset_loader().save_backbone(
                self.backbone,
                staging,
                info,
                self.backbone.head_tensors,
                extra={"embedder": section},
                int8_graph=saved_graph(self),
            )
        return Path(preset_dir)

    def _string_segments(self, x):
        """Texts (a batch, or a tuple of two for pairs) -> 1-D string
        tensors, checked eagerly (invalid UTF-8 is a TextEncodingError
        naming the text)."""
        if self.preprocessor is None:
            raise ValueError(
                "This TextEmbedder has no preprocessor, so it takes token ids "
                "(a dict like the backbone's inputs), not strings."
            )
        segments = x if isinstance(x, tuple) else (x,)
        names = (" of texts_a", " of texts_b") if isinstance(x, tuple) else ("",)
        segments = tuple(check_utf8(to_string_tensor(s), of) for s, of in zip(segments, names))
        for s in segments:
            # A (batch, 1) column is a batch; anything wider is not flattened.
            if s.shape.rank > 2 or s.shape.rank == 2 and s.shape[1] != 1:
                raise ValueError(
                    f"TextEmbedder takes {_TEXTS}; got a string array of shape {tuple(s.shape)}."
                )
        segments = tuple(tf.reshape(s, [-1]) for s in segments)
        sizes = [int(s.shape[0]) for s in segments]
        if len(set(sizes)) > 1:
            raise ValueError(
                "Pairs are a tuple (texts_a, texts_b) of two equally long batches of "
                f"strings; got batches of {' and '.join(map(str, sizes))} texts."
            )
        limit = self.preprocessor.max_text_chars
        cut = sum(count_long_texts(s, limit) for s in segments)
        self._log_cut(cut, sum(int(s.shape[0]) for s in segments))
        return segments

    def _log_cut(self, cut, total):
        """The preprocessor cuts each text to `max_text_chars`; the first
        batch with a cut text says so once."""
        if cut and not self.__dict__.get("_cut_logged"):
            self.__dict__["_cut_logged"] = True
            limit, length = self.preprocessor.max_text_chars, self.preprocessor.sequence_length
            logger.warning(cut_message(cut, total, limit, length, "TextEmbedder: "))

    def _python_rows(self, x):
        """A list of str packed in plain Python, one unpadded row each
        (dicts of int32 (1, S) arrays), with the graph's ids (WordPiece:
        0.07 ms a short text, against about 0.4 ms a call of the tokenizer's
        graph, and no tracing); None where the graph packs: pairs, bytes,
        arrays, tensors, text with no UTF-8 form (the graph's error names
        it), tokenizers with no Python form."""
        tokenizer = self.__dict__.get("_python_tokenizer")
        if tokenizer is None or not isinstance(x, list) or not x:
            return None
        if not all(_encodes(text) for text in x):
            return None
        preprocessor = self.preprocessor
        limit = preprocessor.max_text_chars
        self._log_cut(sum(len(text) > limit for text in x), len(x))
        rows = []
        for text in x:
            ids, _ = python_wordpiece.pack(
                tokenizer, text, None, preprocessor.sequence_length, max_text_chars=limit
            )
            ids = np.asarray([ids], np.int32)
            row = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
            row["segment_ids"] = np.zeros_like(ids)  # one text: segment 0
            rows.append({k: row[k] for k in self.input})
        return rows

    def _pack_function(self, segments):
        """A `tf.function` over 1-D string batches -> packed features,
        traced once per segment count (1, or 2 for pairs) and cached."""
        cache = self.__dict__.setdefault("_text_functions", {})
        if segments not in cache:
            preprocessor = self.preprocessor

            def pack(*texts):
                return preprocessor.pack(texts if len(texts) > 1 else texts[0])

            cache[segments] = tf.function(
                pack, input_signature=[tf.TensorSpec([None], tf.string)] * segments, autograph=False
            )
        return cache[segments]

    def _embed_texts(self, x, batch_size, packing=None):
        runner = litert.attached_runner(self)
        rows = self._python_rows(x)
        if rows is not None and runner is not None:
            return runner.run_feeds(rows)[SINGLE_OUTPUT]
        if rows is not None:
            packed = _stack_rows(rows, self.preprocessor.sequence_length)
        else:
            segments = self._string_segments(x)
            packed = self._pack_function(len(segments))(*segments)
            packed = {k: v.numpy() for k, v in packed.items()}
        if packing:
            return self._packed(packed, batch_size, packing)
        if runner is not None:
            return predict_litert(self, packed)
        return self._by_length(packed, batch_size)

    def predict(self, x, batch_size=32, verbose="auto", packing=False, **kwargs):
        """Strings (a list, a tuple of two lists for pairs, or a string
        tensor) or preprocessed inputs -> embeddings, `(n, hidden_dim)`; a
        single string (or a tuple of two) -> one embedding `(hidden_dim,)`,
        an empty list -> `(0, hidden_dim)`. Anything else (None, numbers, a
        list mixing strings and other things) is an `InputTypeError`; text
        that is not valid UTF-8 a `TextEncodingError` naming the text.

        Texts and dicts of token-id arrays run in length-sorted batches,
        each padded only to its longest text's bucket, through a forward
        pass compiled once (`bertzoo.batching`); the result is in the input
        order. Datasets and generators go through Keras' `predict` (after
        `quantize("int8")` on LiteRT, datasets through the LiteRT graph).

        `packing=True` (or a row length, e.g. 128) packs texts (or
        right-padded token-id rows) end to end into rows instead
        (`bertzoo.packing`; default width: the bucket of the 90th
        percentile length, longer texts in rows of their own), the
        backbone attending within each text, and pools each text; the
        embeddings equal the padded path's to float rounding (about 1e-6).
        Not with a LiteRT-int8 embedder, which runs each text at its own
        length already (an `InputError`)."""
        packing = self._packing_choice(packing)
        if x is None:
            raise InputTypeError(
                f"TextEmbedder takes {_TEXTS}; got None."
                if self.preprocessor is not None
                else "This TextEmbedder has no preprocessor: it takes the backbone's dict "
                "of token ids; got None."
            )
        if self.preprocessor is not None and not _is_preprocessed(x):
            _check_texts(x)
        if self.preprocessor is not None and _is_empty_text(x):
            return np.zeros((0, self.outputs[0].shape[-1]), "float32")
        if _is_text(x):
            if isinstance(x, str | bytes):
                return self.predict([x], batch_size, verbose, packing, **kwargs)[0]
            if isinstance(x, tuple) and all(isinstance(s, str | bytes) for s in x):
                # One pair (or a 1-tuple) of single strings.
                return self.predict(tuple([s] for s in x), batch_size, verbose, packing, **kwargs)[
                    0
                ]
            if kwargs:
                raise TypeError(f"predict() on texts takes no {', '.join(kwargs)} argument.")
            return self._embed_texts(x, batch_size or 32, packing)
        check_predict_inputs(self.backbone, x)  # a dict of ids: keys, dtypes, ranges
        if litert.attached_runner(self) is not None and not kwargs:
            return predict_litert(self, x)
        if not kwargs and batching.is_array_batch(x):
            return (
                self._packed(x, batch_size, packing) if packing else self._by_length(x, batch_size)
            )
        if packing:
            raise InputError(
                f"packing=True takes texts or a dict of token-id arrays, not {x!r:.60}."
            )
        return super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)

    def _by_length(self, features, batch_size):
        return batching.predict_by_length(
            batching.compiled_forward(self),
            features,
            batch_size or 32,
            np.shape(features["padding_mask"])[1],
        )

    # Token-id inputs: the backbone's checks at this model's own entry
    # (its functional graph would otherwise reorder a dict with an extra
    # key, or cast float ids, before the backbone sees them).

    def __call__(self, *args, **kwargs):
        check_model_inputs(args[0] if args else kwargs.get("inputs"), self.input, self.name)
        return super().__call__(*args, **kwargs)

    def call(self, inputs, training=None, mask=None, **kwargs):
        check_model_inputs(inputs, self.input, self.name)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    def embed(self, texts, batch_size=32, packing=False):
        """`predict` without a progress bar: texts -> numpy embeddings."""
        return np.asarray(self.predict(texts, batch_size=batch_size, verbose=0, packing=packing))

    # === Packed rows (bertzoo.packing) ===

    def _packing_choice(self, packing):
        packing = packing_lib.check_packing(packing)
        if packing and litert.attached_runner(self) is not None:
            raise InputError(
                "packing=True does not apply to this embedder: its int8 LiteRT graph runs "
                "each text at its own length (no padding to pack away). Use packing=False."
            )
        positions = self.backbone.max_sequence_length
        if packing is not True and packing is not None and packing > positions:
            # Before, a raw TensorFlow error from the position embeddings.
            raise InputError(
                f"packing={packing} makes rows longer than this model's {positions} positions: "
                f"give a row length of at most {positions}, or packing=True (the width is then "
                "chosen from the texts)."
            )
        return packing

    def _packed(self, features, batch_size, packing):
        """Embeddings of right-padded features packed into rows, pooled per
        text (`bertzoo.packing.pooled_forward`, compiled once per shape)."""
        forward = self.__dict__.get("_packed_forward")
        if forward is None:
            forward = packing_lib.pooled_forward(self.backbone, self.get_layer("pooling"))
            self.__dict__["_packed_forward"] = forward
        features = {k: features[k] for k in self.input}
        row_length = None if packing is True else packing
        return packing_lib.predict_packed(forward, features, batch_size or 32, row_length)
