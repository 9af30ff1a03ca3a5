"""RoBERTa's byte-level BPE tokenizer (GPT-2's) in TensorFlow ops, id for id
identical to Hugging Face's `RobertaTokenizerFast` (the Rust `tokenizers`
library) over the same `vocab.json` and `merges.txt`.

What the reference does to one text, and how it is done here, batched:

1. Special tokens typed in the text ("<s>", "</s>", "<pad>", "<unk>",
   "<mask>") are matched first and become their ids; "<mask>" also absorbs
   the whitespace before it (its `lstrip`). The text between them is
   tokenized piece by piece (one RE2 split).
2. Pre-tokenization splits each stretch with GPT-2's pattern
   `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`.
   RE2 has no lookahead, so `\\s+(?!\\S)` is emulated: a whitespace run
   followed by a non-space character leaves its last character to the next
   piece. The stretch is first cut into segments (each whitespace run but its
   last character; that character with the non-space run after it; a
   trailing run), which no piece crosses; within a segment the pattern
   without the lookahead gives the same pieces. `\\s` is Unicode White_Space
   (Oniguruma's `\\s`), not RE2's ASCII `\\s`.
3. Every piece's UTF-8 bytes become GPT-2's byte-to-unicode characters.
4. BPE on the batch's distinct pieces, vectorised in a `tf.while_loop`:
   each round finds every word's lowest-ranked adjacent pair (a hash table
   of "left right" -> rank), merges its leftmost non-overlapping
   occurrences, and sets aside the words that have no ranked pair left;
   then the symbols' ids are looked up.

With `add_prefix_space=True` a space is put before every stretch that does
not start with one (the reference's ByteLevel option).
"""

import json
from pathlib import Path

import tensorflow as tf

from bertzoo.io.publish import atomic_path
from bertzoo.tokenizers.base import (
    Tokenizer,
    TokenizerError,
    regex_pieces,
    register_tokenizer,
    to_string_tensor,
)

MERGES_FILE = "merges.txt"

# Unicode White_Space: Oniguruma's (and Rust's char::is_whitespace) `\s`.
WHITESPACE = (
    "\\t\\n\\x0b\\x0c\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
    "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
)
_WS = f"[{WHITESPACE}]"
_NOT_WS = f"[^{WHITESPACE}]"
# GPT-2's pattern within a segment (step 2): its `\s+(?!\S)|\s+` is `\s+` there.
PIECE_PATTERN = f"'s|'t|'re|'ve|'m|'ll|'d| ?\\pL+| ?\\pN+| ?[^{WHITESPACE}\\pL\\pN]+|{_WS}+"


def bytes_to_unicode():
    """GPT-2's byte -> character table: printable bytes stand for themselves,
    the others for U+0100 onwards, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1))
    keep += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def read_vocabulary(path):
    """vocab.json (or the directory holding it), a dict of token -> id or
    the tokens in id order -> (list of tokens, index = id; the file's path,
    None in memory); a TokenizerError names what is wrong."""
    if isinstance(path, list | tuple):
        data = {str(t): i for i, t in enumerate(path)}
        if len(data) != len(path):
            raise TokenizerError("The vocabulary lists a token twice.")
        path = None
    elif isinstance(path, dict):
        data, path = dict(path), None
    else:
        path = Path(path)
        if path.is_dir():
            path = path / ByteLevelBPETokenizer.vocabulary_file
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise TokenizerError(f"Vocabulary file {path} does not exist.") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TokenizerError(f"{path} is not a JSON vocabulary (token -> id): {e}.") from None
    return _checked_vocabulary(data, path), path


def _checked_vocabulary(data, path):
    """vocab.json's object -> list of tokens (index = id)."""
    path = "The vocabulary" if path is None else path
    if not isinstance(data, dict) or not data:
        raise TokenizerError(f"{path} must hold a non-empty JSON object of token -> id.")
    bad = [(k, v) for k, v in data.items() if not isinstance(v, int) or isinstance(v, bool)]
    if bad:
        raise TokenizerError(f"{path}: token {bad[0][0]!r} has id {bad[0][1]!r}, not an integer.")
    ids = sorted(data.values())
    if ids != list(range(len(ids))):
        seen, repeated = set(), None
        for i in ids:
            if i in seen:
                repeated = i
                break
            seen.add(i)
        missing = next(i for i in range(len(ids)) if i not in seen or i == len(ids) - 1)
        problem = (
            f"id {repeated} is repeated" if repeated is not None else f"id {missing} is missing"
        )
        raise TokenizerError(
            f"{path}: the ids must be 0..{len(ids) - 1}, each once; {problem} "
            f"(ids run from {ids[0]} to {ids[-1]})."
        )
    vocabulary = [""] * len(ids)
    for token, i in data.items():
        vocabulary[i] = token
    return vocabulary


def read_merges(path, index):
    """merges.txt, or the merges in memory ("left right" strings or (left,
    right) pairs, in rank order) -> list of (left, right) pairs in rank
    order, each checked against the vocabulary `index` (token -> id)."""
    if isinstance(path, str | Path):
        try:
            lines = Path(path).read_text(encoding="utf-8").split("\n")
        except FileNotFoundError:
            raise TokenizerError(
                f"Merges file {path} does not exist (a byte-level BPE needs vocab.json and "
                "merges.txt side by side)."
            ) from None
        except UnicodeDecodeError as e:
            raise TokenizerError(f"{path} is not UTF-8 text: {e}.") from None
    else:
        lines = [m if isinstance(m, str) else " ".join(m) for m in path]
        path = "The merges"
    merges = []
    for number, line in enumerate(lines, 1):
        if (number == 1 and line.startswith("#version")) or not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise TokenizerError(
                f"{path} line {number}: {line!r} is not a merge (two tokens separated by "
                "one space)."
            )
        for token in (*parts, parts[0] + parts[1]):
            if token not in index:
                raise TokenizerError(
                    f"{path} line {number}: the merge {line!r} needs {token!r}, which is "
                    "not in the vocabulary (merges.txt does not match vocab.json)."
                )
        merges.append((parts[0], parts[1]))
    return merges


@register_tokenizer
class ByteLevelBPETokenizer(Tokenizer):
    """Text -> RoBERTa (GPT-2 byte-level BPE) ids, exactly as Hugging Face's
    `RobertaTokenizerFast` over the same files.

    Args:
        vocabulary: path to `vocab.json` (or the directory holding it);
            `merges.txt` is read from the same directory unless `merges`
            names it. Or in memory: the tokens in id order (or a dict of
            token -> id), with `merges` given.
        merges: path to `merges.txt`, or the merges in rank order ("left
            right" strings, as `get_config` gives them, or pairs).
        add_prefix_space: put a space before the text, as if it followed a
            word (RoBERTa's default: False).
        *_token: the special tokens (RoBERTa's: <s>, </s>, <pad>, <unk>,
            <mask>); all must be in the vocabulary.

    Sequences are packed as `<s> A </s>` and `<s> A </s></s> B </s>`.
    """

    vocabulary_file = "vocab.json"
    companion_files = (MERGES_FILE,)
    kind = "byte_level_bpe"
    pair_truncation = "hf-fast"
    pair_separators = 2

    def __init__(
        self,
        vocabulary,
        merges=None,
        add_prefix_space=False,
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        lowercase=False,
        strip_accents=False,
    ):
        super().__init__(cls_token, sep_token, pad_token, unk_token, mask_token)
        if lowercase or strip_accents:
            raise TokenizerError(
                "The byte-level BPE tokenizer does not lowercase or strip accents "
                "(RoBERTa's is cased): pass lowercase=False, strip_accents=False."
            )
        self.lowercase = False
        self.strip_accents = False
        self.add_prefix_space = bool(add_prefix_space)
        self.vocabulary, vocab_path = read_vocabulary(vocabulary)
        self._check_special_tokens(vocab_path or "The vocabulary")
        if merges is None and vocab_path is None:
            raise TokenizerError(
                "A byte-level BPE vocabulary given in memory needs its merges (merges=)."
            )
        self.merges = read_merges(
            vocab_path.parent / MERGES_FILE if merges is None else merges, self._index
        )
        byte_chars = bytes_to_unicode()
        missing = [c for c in byte_chars.values() if c not in self._index]
        if missing:
            raise TokenizerError(
                f"{vocab_path or 'The vocabulary'} lacks {len(missing)} of the 256 byte characters of a byte-level "
                f"BPE (e.g. {missing[0]!r}); is it a GPT-2/RoBERTa vocab.json?"
            )
        self._byte_chars = tf.constant([byte_chars[b] for b in range(256)])
        self._ranks = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant([f"{a} {b}" for a, b in self.merges] or ["\x00"]),
                tf.range(max(len(self.merges), 1), dtype=tf.int32),
            ),
            default_value=-1,
        )
        self._ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.vocabulary),
                tf.range(len(self.vocabulary), dtype=tf.int32),
            ),
            default_value=self._index[self.unk_token],
        )
        self._special_pattern = special_pattern(
            [getattr(self, f"{r}_token") for r in ("cls", "sep", "pad", "unk")], self.mask_token
        )
        self._graphs = _Graphs()

    def get_config(self):
        # The merges ride along, so that the vocabulary and this config
        # rebuild the tokenizer (corpus preparation's workers, serving).
        return {
            "merges": [f"{a} {b}" for a, b in self.merges],
            "add_prefix_space": self.add_prefix_space,
            **{
                f"{r}_token": getattr(self, f"{r}_token")
                for r in ("cls", "sep", "pad", "unk", "mask")
            },
        }

    def preset_section(self):
        section = super().preset_section()
        section["add_prefix_space"] = self.add_prefix_space
        return section

    # --- steps 1-2: special tokens and pieces ---

    def _pieces(self, strings):
        """A 1-D string batch -> the units that get ids (`split_pieces`)."""
        return split_pieces(strings, self._special_pattern, self.add_prefix_space)

    # --- steps 3-4: bytes and merges ---

    def _bpe(self, words):
        """Distinct words (flat tf.string) -> ragged [words, (tokens)] of
        their BPE tokens (tf.string)."""
        chars = tf.strings.bytes_split(words)
        values = tf.io.decode_raw(chars.flat_values, tf.uint8, fixed_length=1)[:, 0]
        symbols = tf.gather(self._byte_chars, tf.cast(values, tf.int32))
        lengths = chars.row_lengths()
        index = tf.range(tf.size(words, out_type=tf.int64))
        ranks = self._ranks
        big = tf.int32.max

        def body(step, vals, lens, widx, out_vals, out_lens, out_widx):
            splits = tf.concat([[0], tf.cumsum(lens)], 0)
            n = tf.size(vals, out_type=tf.int64)
            pos = tf.range(n)
            row = tf.searchsorted(splits[1:], pos, side="right")
            is_last = tf.equal(pos, tf.gather(splits[1:], row) - 1)
            nxt = tf.gather(vals, tf.minimum(pos + 1, tf.maximum(n - 1, 0)))
            rank = ranks.lookup(tf.strings.join([vals, nxt], " "))
            rank = tf.where(is_last | (rank < 0), big, rank)
            rows = tf.size(lens)
            best = tf.math.unsorted_segment_min(rank, row, rows)
            done = tf.equal(best, big)
            done_at = tf.gather(done, row)
            out_vals = out_vals.write(step, tf.boolean_mask(vals, done_at))
            out_lens = out_lens.write(step, tf.boolean_mask(lens, done))
            out_widx = out_widx.write(step, tf.boolean_mask(widx, done))
            # Merge each word's best pair at its leftmost non-overlapping
            # occurrences: in a run of consecutive candidates (a pair "a a"
            # in "a a a"), the 1st, 3rd, ...
            cand = tf.equal(rank, tf.gather(best, row)) & (rank < big)
            run = tf.cumsum(tf.cast(~cand, tf.int64))
            first = tf.math.unsorted_segment_min(pos, run, n + 1)
            before = tf.where(tf.equal(run, 0), tf.constant(-1, tf.int64), tf.gather(first, run))
            choose = cand & tf.equal((pos - before - 1) % 2, 0)
            eaten = tf.concat([[False], choose[:-1]], 0)
            merged = tf.where(choose, tf.strings.join([vals, nxt]), vals)
            keep = ~eaten & ~done_at
            eaten_per_row = tf.math.unsorted_segment_sum(tf.cast(choose, tf.int64), row, rows)
            active = ~done
            return (
                step + 1,
                tf.boolean_mask(merged, keep),
                tf.boolean_mask(lens - eaten_per_row, active),
                tf.boolean_mask(widx, active),
                out_vals,
                out_lens,
                out_widx,
            )

        def array(dtype):
            return tf.TensorArray(dtype, size=0, dynamic_size=True, infer_shape=False)

        out = (array(tf.string), array(tf.int64), array(tf.int64))
        out = (
            out[0].write(0, tf.zeros([0], tf.string)),
            out[1].write(0, tf.zeros([0], tf.int64)),
            out[2].write(0, tf.zeros([0], tf.int64)),
        )
        loop = tf.while_loop(
            lambda step, vals, lens, *_: tf.size(lens) > 0,
            body,
            (tf.constant(1), symbols, lengths, index, *out),
            shape_invariants=(
                tf.TensorShape([]),
                tf.TensorShape([None]),
                tf.TensorShape([None]),
                tf.TensorShape([None]),
                None,
                None,
                None,
            ),
            parallel_iterations=1,
        )
        tokens = tf.RaggedTensor.from_row_lengths(loop[4].concat(), loop[5].concat())
        return tf.gather(tokens, tf.math.invert_permutation(loop[6].concat()))

    @tf.autograph.experimental.do_not_convert
    def token_strings(self, strings):
        """A 1-D string batch -> ragged [batch, (tokens)] of token strings
        (byte-level characters: "Ġhello")."""
        strings = tf.convert_to_tensor(strings, tf.string)
        tokens, rows, _, _ = self._tokens(strings)
        return tf.RaggedTensor.from_value_rowids(tokens, rows, tf.size(strings, tf.int64))

    def _tokens(self, strings, details=False):
        """Every token of a 1-D string batch, flat in text order: (token
        strings, their text's row, their unit's byte start and end); with
        `details` also (is it a special token, the flat index of its unit's
        first token). A unit is a pre-tokenized piece or a special token."""
        text, special, row, starts, ends = self._pieces(strings)
        words, which = tf.unique(tf.boolean_mask(text, ~special), out_idx=tf.int64)
        bpe = tf.gather(self._run(self._bpe, words), which)  # [plain units, (tokens)]
        special_text = tf.strings.regex_replace(tf.boolean_mask(text, special), f"^{_WS}+", "")
        units = tf.concat([bpe, tf.RaggedTensor.from_tensor(special_text[:, None])], 0)
        plain_at, special_at = tf.where(~special)[:, 0], tf.where(special)[:, 0]
        order = tf.math.invert_permutation(tf.concat([plain_at, special_at], 0))
        units = tf.gather(units, order)  # [units, (tokens)], in text order
        unit_of = units.value_rowids()
        out = (
            units.flat_values,
            tf.gather(row, unit_of),
            tf.gather(starts, unit_of),
            tf.gather(ends, unit_of),
        )
        if details:
            out += (tf.gather(special, unit_of), tf.gather(units.row_splits, unit_of))
        return out

    @tf.autograph.experimental.do_not_convert
    def tokenize_ids(self, strings):
        strings = tf.convert_to_tensor(strings, tf.string)
        return self._tokenize_ids(strings)

    def _tokenize_ids(self, strings):
        tokens, rows, _, _ = self._tokens(strings)
        ids = self._ids.lookup(tokens)
        return tf.RaggedTensor.from_value_rowids(ids, rows, tf.size(strings, tf.int64))

    def _run(self, method, strings):
        """`method(strings)`; called eagerly, through a traced graph of it
        (kept out of the module's tracked state), so that the merge loop
        does not run op by op from Python (some 30 ops a round)."""
        if not tf.executing_eagerly():
            return method(strings)
        graphs = self._graphs.functions
        if method.__name__ not in graphs:
            graphs[method.__name__] = tf.function(
                method, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False
            )
        return graphs[method.__name__](strings)

    @tf.autograph.experimental.do_not_convert
    def tokenize_with_offsets(self, strings):
        """Strings -> (ids, starts, ends), as `Tokenizer.tokenize_with_offsets`:
        int32 ids and each token's own [start, end) byte span in the text
        (not its word's), as the reference reports them (in characters):
        a token covering part of a character's bytes spans the whole
        character, and the post-processor's `trim_offsets` moves a token's
        span past its leading spaces ("Ġ") and before its trailing ones (a
        token of spaces only gets an empty span at its end). A special token
        spans its own text ("<mask>" without the whitespace it absorbed).
        The spans follow the reference for `add_prefix_space=False`; with
        True, a word's added space has no bytes and the span starts at the
        word."""
        strings = to_string_tensor(strings)
        rank = strings.shape.rank
        if rank is not None and rank > 1:
            raise ValueError(
                "tokenize_with_offsets takes a string or a 1-D batch of strings, got shape "
                f"{strings.shape}."
            )
        scalar = rank == 0
        if scalar:
            strings = tf.reshape(strings, [-1])
        ids, starts, ends = self._with_offsets(strings)
        if scalar:
            return ids[0], starts[0], ends[0]
        return ids, starts, ends

    def _with_offsets(self, strings):
        tokens, rows, unit_starts, unit_ends, special, first = self._tokens(strings, True)
        ids = self._ids.lookup(tokens)
        # Each token's bytes within its unit: a byte-level token has one
        # character per byte.
        size = tf.cast(tf.strings.length(tokens, unit="UTF8_CHAR"), tf.int64)
        within = tf.cumsum(size, exclusive=True)
        within -= tf.gather(within, first)  # from the unit's first token
        start = unit_starts + within
        end = start + size
        # Special tokens span their own text, at the end of their unit.
        own = tf.cast(tf.strings.length(tokens), tf.int64)
        start = tf.where(special, unit_ends - own, start)
        end = tf.where(special, unit_ends, end)
        # Whole characters: the start of the character holding the first
        # byte, the end of the one holding the last (over the batch's bytes
        # laid end to end).
        lengths = tf.cast(tf.strings.length(strings), tf.int64)
        base = tf.cumsum(lengths, exclusive=True)
        _, char_starts = tf.strings.unicode_decode_with_offsets(
            strings, "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        char_starts = char_starts.with_flat_values(tf.cast(char_starts.flat_values, tf.int64))
        bounds = tf.sort(tf.concat([(char_starts + base[:, None]).flat_values, base + lengths], 0))
        text_base = tf.gather(base, rows)
        at_start = tf.searchsorted(bounds, text_base + start, side="right") - 1
        at_end = tf.searchsorted(bounds, text_base + end - 1, side="right")
        plain = ~special
        start = tf.where(plain, tf.gather(bounds, tf.maximum(at_start, 0)) - text_base, start)
        end = tf.where(plain, tf.gather(bounds, at_end) - text_base, end)
        # trim_offsets.
        space = bytes_to_unicode()[ord(" ")]
        lead = tf.strings.length(
            tf.strings.regex_replace(tokens, f"(?s)^({space}*).*$", "\\1"), unit="UTF8_CHAR"
        )
        trail = tf.strings.length(
            tf.strings.regex_replace(tokens, f"(?s)^.*?({space}*)$", "\\1"), unit="UTF8_CHAR"
        )
        lead, trail = tf.cast(lead, tf.int64), tf.cast(trail, tf.int64)
        start = tf.where(lead > 0, tf.minimum(start + lead, end), start)
        end = tf.where((trail > 0) & (end >= trail), tf.maximum(end - trail, start), end)
        n = tf.size(strings, tf.int64)
        return tuple(tf.RaggedTensor.from_value_rowids(v, rows, n) for v in (ids, start, end))

    def _write_vocabulary(self, path):
        index = {token: i for i, token in enumerate(self.vocabulary)}
        with atomic_path(path) as tmp:
            Path(tmp).write_text(json.dumps(index, ensure_ascii=False), encoding="utf-8")
        merges = Path(path).parent / MERGES_FILE
        with atomic_path(merges) as tmp:
            Path(tmp).write_text(
                "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in self.merges),
                encoding="utf-8",
            )


class _Graphs:
    """The traced functions of eager calls (`ByteLevelBPETokenizer._run`): a
    plain object, which `tf.Module` does not track (they are no part of a
    saved graph, which traces the tokenizer's ops itself)."""

    def __init__(self):
        self.functions = {}


def _quote(token):
    return "".join(c if c.isalnum() else f"\\x{{{ord(c):x}}}" for c in token)


def special_pattern(tokens, mask_token="<mask>"):
    """The RE2 pattern of the special-token strings a text may hold (step
    1): `mask_token` with the whitespace before it (its `lstrip`), and the
    other `tokens`."""
    alternatives = [f"{_WS}*{_quote(mask_token)}"]
    alternatives += [_quote(t) for t in sorted(set(tokens)) if t != mask_token]
    return "|".join(alternatives)


# RoBERTa's special tokens and their pattern.
ROBERTA_SPECIAL_TOKENS = ("<s>", "</s>", "<pad>", "<unk>")
ROBERTA_SPECIAL_PATTERN = special_pattern(ROBERTA_SPECIAL_TOKENS, "<mask>")


def split_pieces(strings, pattern, add_prefix_space=False):
    """Steps 1-2 of the module docstring on a 1-D string batch: the units
    that get ids, flat and in text order, as (text; is it a special token
    (a match of `pattern`, `special_pattern`'s); the index of the string it comes
    from, int64; its byte start and end in that string, int64). The
    vocabulary trainer (`bertzoo.tokenizers.train_bpe`) counts the plain
    pieces this gives, so it learns on exactly what the tokenizer merges."""
    pat = pattern
    stretches, s_row, s_start, s_end = _split(strings, pat, pat)
    special = tf.strings.regex_full_match(stretches, pat)
    plain = tf.where(~special)[:, 0]
    text = tf.gather(stretches, plain)
    shift = tf.zeros_like(plain)
    if add_prefix_space:
        add = ~tf.strings.regex_full_match(text, "(?s) .*")
        text = tf.where(add, tf.strings.join([" ", text]), text)
        shift = tf.cast(add, tf.int64)
    # Segments, which no piece crosses (module docstring, step 2).
    segment = f"{_WS}{_NOT_WS}+"
    segments, g_row, g_start, g_end = _split(text, segment, segment)
    pieces, p_row, p_start, p_end = _split(segments, PIECE_PATTERN, PIECE_PATTERN)
    # Offsets in the stretch (a prefix space has none), then in the text.
    base = tf.gather(g_start, p_row) - tf.gather(shift, tf.gather(g_row, p_row))
    p_start, p_end = tf.maximum(base + p_start, 0), tf.maximum(base + p_end, 0)
    p_stretch = tf.gather(plain, tf.gather(g_row, p_row))
    special_at = tf.where(special)[:, 0]
    # Units: the pieces and the special tokens, ordered by stretch.
    unit_stretch = tf.concat([p_stretch, special_at], 0)
    order = tf.argsort(unit_stretch, stable=True)
    unit_text = tf.gather(tf.concat([pieces, tf.gather(stretches, special_at)], 0), order)
    is_special = tf.gather(
        tf.concat([tf.zeros_like(p_stretch, tf.bool), tf.ones_like(special_at, tf.bool)], 0),
        order,
    )
    unit_stretch = tf.gather(unit_stretch, order)
    zeros = tf.zeros_like(special_at)
    starts = tf.gather(tf.concat([p_start, zeros], 0), order)
    ends = tf.gather(tf.concat([p_end, tf.gather(s_end - s_start, special_at)], 0), order)
    offset = tf.gather(s_start, unit_stretch)
    return unit_text, is_special, tf.gather(s_row, unit_stretch), offset + starts, offset + ends


def _split(strings, delimiters, kept):
    """`regex_pieces` flattened: (pieces, their string's index, byte start,
    byte end), all flat, int64."""
    pieces, starts, ends = regex_pieces(strings, delimiters, kept)
    return (
        pieces,
        starts.value_rowids(),
        tf.cast(starts.flat_values, tf.int64),
        tf.cast(ends.flat_values, tf.int64),
    )
