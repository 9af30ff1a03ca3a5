"""XLM-RoBERTa's tokenizer in TensorFlow ops: SentencePiece unigram with
fairseq's ids, id-for-id identical to Hugging Face's XLMRobertaTokenizer
(transformers 5; `XLMRobertaTokenizerFast` before it), the Rust
`tokenizers` pipeline it builds from a `sentencepiece.bpe.model`:

1. special-token strings typed in the text ("<s>", "</s>", "<pad>",
   "<unk>", "<mask>") are cut out first and become their own ids;
2. normaliser `Precompiled` (the model's precompiled charsmap, e.g.
   nmt_nfkc), applied grapheme cluster by grapheme cluster (UAX #29): a
   cluster shorter than 6 UTF-8 bytes whose first characters are a key of
   the charsmap is replaced whole by the shortest such key's replacement
   (the rest of the cluster is dropped, as `tokenizers` does); otherwise
   each character is replaced by its own entry, if any. Plain
   SentencePiece instead matches the longest key at each position, so the
   two differ on some inputs; this module follows `tokenizers`;
3. pre-tokeniser `WhitespaceSplit` (Rust's `char::is_whitespace`) then
   `Metaspace` (prepend "▁" to every word that does not start with one,
   split before every "▁");
4. the unigram model (Viterbi; runs of unknown characters one <unk>);
5. ids in fairseq's order: <s> 0, <pad> 1, </s> 2, <unk> 3, SentencePiece
   piece i at i + 1 (its own <unk>, <s>, </s> at 3, 0, 2), <mask> last at
   len(model) + 1.

Steps 2-3 are RE2 string ops and hash-table lookups (the charsmap's keys,
read from its Darts double-array trie); step 4 is tensorflow-text's
SentencepieceTokenizer over the same pieces and scores, with the model's own
normaliser turned off. Pairs are `<s> A </s></s> B </s>` (`pair_separators
= 2`).
"""

import functools
import struct
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bertzoo.io.publish import atomic_path
from bertzoo.tokenizers import grapheme_tables
from bertzoo.tokenizers.base import (
    UNICODE_WHITESPACE,
    Tokenizer,
    TokenizerError,
    regex_pieces,
    register_tokenizer,
    row_ids,
)
from bertzoo.tokenizers.sentencepiece import model_pieces, read_model_proto

SPIECE_UNDERLINE = "\u2581"
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
# Rust's char::is_whitespace (the White_Space property): WhitespaceSplit.
WHITESPACE = "[\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}]"
WHITESPACE_CHARS = UNICODE_WHITESPACE
# A piece no charsmap value can be (invalid UTF-8): "no entry".
_MISSING = b"\xff"
# Clusters shorter than this many bytes are looked up whole.
_WHOLE_CLUSTER_BYTES = 6


def _class(name):
    parts = []
    for item in grapheme_tables.RANGES[name].split():
        lo, _, hi = item.partition("-")
        parts.append(f"\\x{{{lo}}}" + (f"-\\x{{{hi}}}" if hi else ""))
    return "[" + "".join(parts) + "]"


@functools.cache
def cluster_pattern():
    """An RE2 pattern matching one extended grapheme cluster (UAX #29:
    GB3-GB13 with GB9c's Indic conjuncts), leftmost-first."""
    c = {name: _class(name) for name in grapheme_tables.RANGES}
    control = f"(?:{c['control']}|\\r|\\n)"
    not_control = f"[^{c['control'][1:-1]}\\r\\n]"
    hangul = f"{c['l']}*(?:{c['v']}+|{c['lv']}{c['v']}*|{c['lvt']}){c['t']}*|{c['l']}+|{c['t']}+"
    linker_run = f"(?:{c['incb_extend']}|{c['incb_linker']})"
    conjunct = (
        f"{c['incb_consonant']}(?:{linker_run}*{c['incb_linker']}{linker_run}*"
        f"{c['incb_consonant']})+"
    )
    pictographic = f"{c['pictographic']}(?:{c['extend']}*{c['zwj']}{c['pictographic']})*"
    core = f"(?:{conjunct}|{pictographic}|{hangul}|{c['ri']}{c['ri']}|{not_control})"
    post = f"(?:{c['extend']}|{c['zwj']}|{c['spacing_mark']})"
    return f"(?s)(?:\\r\\n|{control}|{c['prepend']}*{core}{post}*)"


def _darts_entries(trie, normalized):
    """Every (key, replacement) of a Darts double-array trie (uint32 units)
    whose values index NUL-terminated strings in `normalized`: a
    breadth-first walk, one level (key length) at a time.

    A unit i is the child of the node with base b under the byte c exactly
    when i == b ^ c and its label is c, that is when b == i ^ label(i) for a
    label in 1..255: the units, sorted by that base, list every node's
    children, so a level costs its children (not 255 probes per node: 7.6 s
    against 0.3 s for nmt_nfkc's 225,276 keys)."""
    units = np.frombuffer(trie, dtype="<u4").astype(np.int64)
    offsets = (units >> 10) << ((units & (1 << 9)) >> 6)
    labels = units & ((1 << 31) | 0xFF)
    has_leaf = ((units >> 8) & 1).astype(bool)
    blob = np.frombuffer(normalized, dtype=np.uint8)
    nul = np.flatnonzero(blob == 0)
    index = np.flatnonzero((labels >= 1) & (labels <= 255))
    parent = index ^ labels[index]
    order = np.argsort(parent, kind="stable")
    parent, index = parent[order], index[order]
    entries = {}
    bases = np.array([offsets[0]])
    keys = [b""]
    while len(bases):
        lo = np.searchsorted(parent, bases, "left")
        counts = np.searchsorted(parent, bases, "right") - lo  # children per node
        node = np.repeat(np.arange(len(bases)), counts)
        # Each child's place in `index`: its node's first, plus its rank there.
        first = np.repeat(lo - np.cumsum(counts) + counts, counts)
        child = index[first + np.arange(counts.sum())]
        child_bases = child ^ offsets[child]
        codes = labels[child].tolist()
        child_keys = [keys[n] + bytes((c,)) for n, c in zip(node.tolist(), codes)]
        leaves = np.flatnonzero(has_leaf[child])
        starts = units[child_bases[leaves]] & ((1 << 31) - 1)
        ends = np.append(nul, len(blob))[np.searchsorted(nul, starts)]
        for i, start, end in zip(leaves.tolist(), starts.tolist(), ends.tolist()):
            entries[child_keys[i]] = normalized[start:end]
        bases, keys = child_bases, child_keys
    return entries


@functools.lru_cache(maxsize=8)
def _charsmap_entries(charsmap):
    """A precompiled charsmap -> {key bytes: replacement bytes}."""
    if not charsmap:
        return {}
    (trie_size,) = struct.unpack("<I", charsmap[:4])
    trie = charsmap[4 : 4 + trie_size]
    return _darts_entries(trie, charsmap[4 + trie_size :])


def charsmap_entries(charsmap):
    """The (key, replacement) pairs of a SentencePiece precompiled charsmap,
    as sorted lists of UTF-8 bytes (keys that are not valid UTF-8, which no
    text holds, left out)."""
    entries = _charsmap_entries(bytes(charsmap))
    keys = []
    for key in sorted(entries):
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            continue
        keys.append(key)
    return keys, [entries[k] for k in keys]


def _model_proto_module():
    """sentencepiece's generated protobuf module, imported when an XLM-R
    tokenizer is built: importing it needs protobuf >= 7, and an environment
    with apache-beam (which pins protobuf < 7) loads bertzoo's tokenizer
    kinds without building one."""
    from sentencepiece import sentencepiece_model_pb2

    return sentencepiece_model_pb2


@register_tokenizer
class XLMRobertaTokenizer(Tokenizer):
    """Text -> XLM-R (fairseq) ids, exactly as Hugging Face's
    XLMRobertaTokenizer (see the module docstring).

    Args:
        proto: path to a SentencePiece `sentencepiece.bpe.model` or its bytes.
        *_token: the special tokens, XLM-R's by default (they are fixed by
            fairseq's id layout: <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> last).

    Example:

        tokenizer = XLMRobertaTokenizer("sentencepiece.bpe.model")
        tokenizer(["Hello world"])  # ragged int32 ids, without <s> and </s>
    """

    vocabulary_file = "sentencepiece.bpe.model"
    kind = "fairseq_sentencepiece"
    # Hugging Face's Rust tokenizer cuts pairs (its rule, see
    # `bertzoo.preprocessing.truncate_longest_first`).
    pair_truncation = "hf-fast"
    pair_separators = 2
    mask_absorbs = UNICODE_WHITESPACE  # "<mask>" lstrip (and WhitespaceSplit)
    adds_prefix_space = True  # Metaspace: "▁" before the text

    def __init__(
        self,
        proto,
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
    ):
        defaults = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}
        given = dict(cls=cls_token, sep=sep_token, pad=pad_token, unk=unk_token, mask=mask_token)
        odd = [f"{r}_token={t!r}" for r, t in given.items() if t != defaults[r]]
        if odd:
            raise TokenizerError(
                f"XLMRobertaTokenizer's special tokens are fixed by fairseq's ids; got "
                f"{', '.join(odd)}. Supported: cls_token='<s>', sep_token='</s>', "
                "pad_token='<pad>', unk_token='<unk>', mask_token='<mask>'."
            )
        super().__init__(cls_token, sep_token, pad_token, unk_token, mask_token)
        self.proto, source = read_model_proto(proto)
        pieces = model_pieces(self.proto, source)
        sentencepiece_model_pb2 = _model_proto_module()
        model = sentencepiece_model_pb2.ModelProto()
        model.ParseFromString(self.proto)
        if model.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
            raise TokenizerError(
                f"{source} is not a unigram SentencePiece model; XLM-R's tokenizer needs "
                "one (model_type unigram)."
            )
        if pieces[:3] != ["<unk>", "<s>", "</s>"]:
            raise TokenizerError(
                f"{source} starts with {pieces[:3]}; XLM-R's SentencePiece model starts "
                "with <unk>, <s>, </s> (ids 0, 1, 2), which fairseq maps to 3, 0, 2."
            )
        if model.trainer_spec.byte_fallback or model.trainer_spec.treat_whitespace_as_suffix:
            raise TokenizerError(
                f"{source}: byte_fallback and treat_whitespace_as_suffix are not supported "
                "(XLM-R's model has neither)."
            )
        # fairseq: <s> <pad> </s> <unk>, pieces 3.. at +1, <mask> last.
        self.vocabulary = [*FAIRSEQ_SPECIALS, *pieces[3:], mask_token]
        self._index = {token: i for i, token in enumerate(self.vocabulary)}
        for i, token in enumerate(FAIRSEQ_SPECIALS):
            self._index[token] = i
        self.lowercase = False
        self.strip_accents = False
        keys, values = charsmap_entries(model.normalizer_spec.precompiled_charsmap)
        # Whitespace (WhitespaceSplit's) that the charsmap keeps whitespace:
        # what separates words for `tokenize_with_offsets` (not e.g. U+000B,
        # which nmt_nfkc deletes, joining the words around it).
        table = dict(zip(keys, values, strict=True))
        self._separators = [
            c
            for c in WHITESPACE_CHARS
            if (n := table.get(c.encode(), c.encode()).decode())
            and all(ch in WHITESPACE_CHARS for ch in n)
        ]
        # The charsmap as a hash table, owned (tracked) by this module.
        self._table = None
        if keys:
            self._table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(keys, tf.string), tf.constant(values, tf.string)
                ),
                default_value=_MISSING,
            )
        # The unigram model without its own normaliser: steps 2-3 are done.
        bare = _model_proto_module().ModelProto()
        bare.CopyFrom(model)
        spec = bare.normalizer_spec
        spec.name = "identity"
        spec.precompiled_charsmap = b""
        spec.add_dummy_prefix = False
        spec.remove_extra_whitespaces = False
        spec.escape_whitespaces = False
        bare.ClearField("denormalizer_spec")
        self._model = bare.SerializeToString()

    def get_config(self):
        return {}

    def token_text(self, token_id):
        """The piece with "▁" read as a space ("▁cat" -> " cat"); special
        tokens read as themselves."""
        token = self.id_to_token(token_id)
        if token in (*FAIRSEQ_SPECIALS, self.mask_token):
            return token
        return token.replace(SPIECE_UNDERLINE, " ")

    def _encoder(self):
        """A tensorflow-text SentencePiece op over the bare model, made per
        call as in `SentencePieceTokenizer._encoder`."""
        return tf_text.SentencepieceTokenizer(model=self._model, out_type=tf.int32)

    def normalize(self, strings):
        """Step 2 of the module docstring on a 1-D string batch."""
        text = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        table = self._table
        if table is None:
            return text
        pattern = cluster_pattern()
        clusters, starts, _ = regex_pieces(text, pattern, pattern)
        # Each character alone.
        chars = tf.strings.unicode_split(clusters, "UTF-8")
        found = table.lookup(chars.flat_values)
        mapped = tf.where(tf.equal(found, _MISSING), chars.flat_values, found)
        per_char = tf.strings.reduce_join(chars.with_flat_values(mapped), axis=1)
        # The whole cluster: its shortest prefix that is a key.
        length = chars.row_lengths()
        whole = tf.fill(tf.shape(clusters), _MISSING)
        for k in range(_WHOLE_CLUSTER_BYTES - 1, 0, -1):  # shortest wins: last
            prefix = tf.strings.substr(clusters, 0, k, unit="UTF8_CHAR")
            value = table.lookup(prefix)
            hit = (length >= k) & tf.not_equal(value, _MISSING)
            whole = tf.where(hit, value, whole)
        use_whole = (tf.strings.length(clusters) < _WHOLE_CLUSTER_BYTES) & tf.not_equal(
            whole, _MISSING
        )
        out = tf.where(use_whole, whole, per_char)
        return tf.strings.reduce_join(starts.with_flat_values(out), axis=1)

    def pre_tokenize(self, normalized):
        """Step 3: the Metaspace text ("▁word▁word..."), which the unigram
        op splits before every "▁" exactly as Metaspace does."""
        text = tf.strings.regex_replace(normalized, WHITESPACE + "+", " ")
        text = tf.strings.regex_replace(text, "^ | $", "")
        text = tf.strings.regex_replace(text, f"(?s)(^| )([^{SPIECE_UNDERLINE}])", "▁\\2")
        return tf.strings.regex_replace(text, " ", "")

    def _plain_ids(self, strings):
        """Steps 2-5 on text without special-token strings."""
        text = self.pre_tokenize(self.normalize(strings))
        ids = self._encoder().tokenize(text)
        values = ids.flat_values
        values = tf.where(tf.equal(values, 0), 3, values + 1)  # sp <unk> -> 3
        return ids.with_flat_values(tf.cast(values, tf.int32))

    def tokenize_ids(self, strings):
        specials = [*FAIRSEQ_SPECIALS, self.mask_token]
        pattern = "|".join(_re2_literal(s) for s in specials)
        has = tf.strings.regex_full_match(strings, f"(?s).*(?:{pattern}).*")
        plain = self._plain_ids(strings)

        def with_specials():
            rows = tf.where(has)[:, 0]
            chosen = tf.gather(strings, rows)
            # Segments: the special strings and the text between them.
            parts, starts, _ = regex_pieces(chosen, pattern, pattern)
            special_id = tf.fill(tf.shape(parts), -1)
            for i, s in enumerate(specials):
                token_id = i if i < 4 else len(self.vocabulary) - 1
                special_id = tf.where(tf.equal(parts, s), token_id, special_id)
            is_special = special_id >= 0
            seg = self._plain_ids(tf.where(is_special, "", parts))  # specials: []
            special_rows = tf.RaggedTensor.from_row_lengths(
                tf.boolean_mask(special_id, is_special), tf.cast(is_special, tf.int64)
            )
            seg = tf.concat([seg.with_row_splits_dtype(tf.int64), special_rows], axis=1)
            joined = starts.with_row_splits_dtype(tf.int64).with_flat_values(seg).merge_dims(1, 2)
            # Replace rows `rows` of `plain` by `joined`.
            lengths = plain.row_lengths()
            new_lengths = tf.tensor_scatter_nd_update(lengths, rows[:, None], joined.row_lengths())
            keep = tf.repeat(~has, lengths)
            kept_values = tf.boolean_mask(plain.flat_values, keep)
            kept_rows = tf.boolean_mask(plain.value_rowids(), keep)
            new_rowids = tf.concat([kept_rows, tf.gather(rows, joined.value_rowids())], 0)
            new_values = tf.concat([kept_values, joined.flat_values], 0)
            order = tf.argsort(new_rowids, stable=True)
            return tf.RaggedTensor.from_row_lengths(
                tf.gather(new_values, order), new_lengths, validate=False
            ).with_row_splits_dtype(plain.row_splits.dtype)

        return tf.cond(tf.reduce_any(has), with_specials, lambda: plain)

    def _offset_pieces(self, strings):
        """Pieces for `tokenize_with_offsets`: the runs of grapheme clusters
        between clusters made only of whitespace that stays whitespace
        (`_separators`). A cluster never spans such a piece boundary and the
        pre-tokeniser splits words there, so every piece tokenizes alone to
        exactly its tokens in the whole text; all the tokens of a piece
        share its span."""
        text = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        pattern = cluster_pattern()
        clusters, starts, ends = regex_pieces(text, pattern, pattern)
        separators = "".join(f"\\x{{{ord(c):x}}}" for c in self._separators)
        is_space = tf.strings.regex_full_match(clusters, f"(?s)[{separators}]+")
        row = row_ids(starts.row_splits)
        flat_starts = tf.cast(starts.flat_values, tf.int64)
        flat_ends = tf.cast(ends.flat_values, tf.int64)
        previous_space = tf.concat([[True], is_space[:-1]], 0)
        previous_row = tf.concat([[-1], row[:-1]], 0)
        begins = ~is_space & (previous_space | tf.not_equal(row, previous_row))
        word = tf.cumsum(tf.cast(begins, tf.int64)) - 1
        keep = tf.where(~is_space)[:, 0]
        words = tf.reduce_sum(tf.cast(begins, tf.int64))
        segment = tf.gather(word, keep)
        piece_text = tf.strings.unsorted_segment_join(tf.gather(clusters, keep), segment, words)
        piece_start = tf.math.unsorted_segment_min(tf.gather(flat_starts, keep), segment, words)
        piece_end = tf.math.unsorted_segment_max(tf.gather(flat_ends, keep), segment, words)
        piece_row = tf.boolean_mask(row, begins)
        splits = tf.concat(
            [
                [0],
                tf.cumsum(
                    tf.math.bincount(
                        piece_row, minlength=tf.size(strings, out_type=tf.int64), dtype=tf.int64
                    )
                ),
            ],
            0,
        )
        return (
            piece_text,
            tf.RaggedTensor.from_row_splits(piece_start, splits, validate=False),
            tf.RaggedTensor.from_row_splits(piece_end, splits, validate=False),
        )

    def _write_vocabulary(self, path):
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(self.proto)

    def preset_section(self):
        return {"kind": self.kind}


def _re2_literal(text):
    """`text` as an RE2 literal."""
    return "".join(f"\\{c}" if not c.isalnum() else c for c in text)
