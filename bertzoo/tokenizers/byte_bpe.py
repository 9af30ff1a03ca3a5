"""Byte-level BPE tokenizers (GPT-2's, as RoBERTa and ModernBERT use them) in
TensorFlow ops, id for id identical to Hugging Face's tokenizers (the Rust
`tokenizers` library) over the same files: RoBERTa's `vocab.json` and
`merges.txt` (`RobertaTokenizerFast`), or a `tokenizer.json` such as
ModernBERT's (transformers 5 loads it as it is).

What the reference does to one text, and how it is done here, batched:

1. Added tokens typed in the text are matched first and become their ids,
   leftmost and longest first (an RE2 alternation, longest token first),
   in two passes: the tokens marked `normalized: false` (the special ones:
   RoBERTa's "<s>", "</s>", "<pad>", "<unk>", "<mask>", ModernBERT's
   "[CLS]", "[MASK]", ...) in the raw text, then, in the text between
   them after the normaliser, the others (ModernBERT's runs of 2 to 24
   spaces, "[unused0]", "|||IP_ADDRESS|||", ...). A token with `lstrip`
   ("<mask>", "[MASK]") also absorbs the whitespace before it. The text
   between the added tokens is tokenized stretch by stretch.
2. The normaliser, if any, is Unicode NFC (ModernBERT's), applied to each
   stretch the first pass leaves: tensorflow-text's ICU NFC, except that
   the library's Unicode tables are older and leave newer combining marks
   alone, so a stretch ICU changes is normalised run by run of the
   characters the library's NFC acts on (hf_nfc_tables.json, measured
   from the library), the others kept as they are.
3. Pre-tokenization splits each stretch with GPT-2's pattern
   `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`.
   RE2 has no lookahead, so `\\s+(?!\\S)` is emulated: a whitespace run
   followed by a non-space character leaves its last character to the next
   piece. The stretch is first cut into segments (each whitespace run but its
   last character; that character with the non-space run after it; a
   trailing run), which no piece crosses; within a segment the pattern
   without the lookahead gives the same pieces. `\\s` is Unicode White_Space
   (Oniguruma's `\\s`), not RE2's ASCII `\\s`.
4. Every piece's UTF-8 bytes become GPT-2's byte-to-unicode characters.
5. BPE on the batch's distinct pieces, vectorised in a `tf.while_loop`:
   each round finds every word's lowest-ranked adjacent pair (a hash table
   of "left right" -> rank), merges its leftmost non-overlapping
   occurrences, and sets aside the words that have no ranked pair left;
   then the symbols' ids are looked up.

With `add_prefix_space=True` a space is put before every stretch that does
not start with one (the reference's ByteLevel option).

A `tokenizer.json` is read only if its pipeline is one of these (anything
else is a one-line `TokenizerError` naming the option): a BPE model without
dropout, subword prefix or suffix, byte fallback or ignore_merges; no
normaliser or NFC; a ByteLevel pre-tokenizer with GPT-2's split
(`use_regex`); added tokens without `single_word` or `rstrip`; and a
RobertaProcessing, BertProcessing or TemplateProcessing post-processor
that packs `CLS A SEP` and `CLS A SEP B SEP` (or `CLS A SEP SEP B SEP`).
"""

import functools
import json
import unicodedata
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text

from bertzoo.io.bounded import MAX_TOKENS, TOKENIZER_BYTES, read_bounded, read_bounded_text
from bertzoo.io.jsonfile import parse_json
from bertzoo.io.publish import atomic_path
from bertzoo.tokenizers.base import (
    UNICODE_WHITESPACE,
    Tokenizer,
    TokenizerError,
    regex_pieces,
    register_tokenizer,
    to_string_tensor,
)
from bertzoo.tokenizers.hf_config import TOKENIZER_JSON_FILE, json_text

MERGES_FILE = "merges.txt"
# The code points the Rust library's NFC acts on (tests/fixtures/make_hf_nfc_tables.py).
NFC_TABLES_FILE = Path(__file__).with_name("hf_nfc_tables.json")
# RoBERTa's special tokens: the defaults, and the added tokens of a vocab.json.
ROBERTA_SPECIALS = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}

# Unicode White_Space: Oniguruma's (and Rust's char::is_whitespace) `\s`.
WHITESPACE = (
    "\\t\\n\\x0b\\x0c\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
    "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
)
_WS = f"[{WHITESPACE}]"
_NOT_WS = f"[^{WHITESPACE}]"
# GPT-2's pattern within a segment (step 3): its `\s+(?!\S)|\s+` is `\s+` there.
PIECE_PATTERN = f"'s|'t|'re|'ve|'m|'ll|'d| ?\\pL+| ?\\pN+| ?[^{WHITESPACE}\\pL\\pN]+|{_WS}+"
SUPPORTED = (
    "bertzoo's byte-level BPE reproduces a BPE model (no dropout, subword prefix or suffix, "
    "byte fallback or ignore_merges) over a ByteLevel pre-tokenizer with GPT-2's split, no "
    "normalizer or NFC, added tokens (lstrip allowed), and a RobertaProcessing, BertProcessing "
    "or TemplateProcessing post-processor packing CLS A SEP and CLS A SEP (SEP) B SEP, as "
    "RoBERTa's and ModernBERT's tokenizer.json"
)


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


def _json_file(path, what):
    """(the JSON value in `path`, path, the file's bytes); a directory means
    its `vocab.json`, or its `tokenizer.json` when it has no vocab.json.
    The file is read once, bounded (`bertzoo.io.bounded`)."""
    path = Path(path)
    if path.is_dir():
        vocab = path / ByteLevelBPETokenizer.vocabulary_file
        fast = path / TOKENIZER_JSON_FILE
        path = fast if fast.is_file() and not vocab.is_file() else vocab
    try:
        raw = read_bounded(path, TOKENIZER_BYTES, "tokenizer file", TokenizerError)
    except FileNotFoundError:
        raise TokenizerError(f"{what} file {path} does not exist.") from None
    try:
        return parse_json(raw.decode("utf-8")), path, raw
    except (UnicodeDecodeError, ValueError) as e:
        raise TokenizerError(f"{path} is not a JSON vocabulary (token -> id): {e}.") from None


def read_vocabulary(path):
    """vocab.json -> list of tokens (index = id); a TokenizerError names
    what is wrong with the file."""
    data, path, _ = _json_file(path, "Vocabulary")
    return _vocabulary_list(data, path), path


def _in_memory_vocabulary(tokens):
    """The tokens in id order, or a dict of token -> id, as vocab.json's
    object."""
    if isinstance(tokens, dict):
        return dict(tokens)
    data = {str(t): i for i, t in enumerate(tokens)}
    if len(data) != len(tokens):
        raise TokenizerError("The vocabulary lists a token twice.")
    return data


def _vocabulary_list(data, path):
    """{token: id} -> list of tokens (index = id), after checking that the
    ids are 0..n-1, each once."""
    path = "The vocabulary" if path is None else path
    if not isinstance(data, dict) or not data:
        raise TokenizerError(f"{path} must hold a non-empty JSON object of token -> id.")
    if len(data) > MAX_TOKENS:
        raise TokenizerError(
            f"{path} holds {len(data):,} tokens; a vocabulary holds at most {MAX_TOKENS:,}."
        )
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


def _check_merge(parts, index, where, text, mismatch):
    if len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
        raise TokenizerError(
            f"{where}: {text!r} is not a merge (two tokens separated by one space)."
        )
    for token in (*parts, parts[0] + parts[1]):
        if token not in index:
            raise TokenizerError(
                f"{where}: the merge {text!r} needs {token!r}, which is not in the vocabulary "
                f"({mismatch})."
            )
    return (parts[0], parts[1])


def read_merges(path, index):
    """merges.txt, or the merges in memory ("left right" strings or (left,
    right) pairs, in rank order) -> list of (left, right) pairs in rank
    order, each checked against the vocabulary `index` (token -> id)."""
    if isinstance(path, str | Path):
        try:
            text = read_bounded_text(path, TOKENIZER_BYTES, "merges file", TokenizerError)
        except FileNotFoundError:
            raise TokenizerError(
                f"Merges file {path} does not exist (a byte-level BPE needs vocab.json and "
                "merges.txt side by side)."
            ) from None
        # Counted before the text is split (a #version line and a final
        # newline are not merges).
        _check_merge_count(text.count("\n") - 1, path)
        lines = text.split("\n")
    else:
        lines = [m if isinstance(m, str) else " ".join(m) for m in path]
        path = "The merges"
        _check_merge_count(len(lines), path)
    merges, seen = [], {}
    for number, line in enumerate(lines, 1):
        if (number == 1 and line.startswith("#version")) or not line.strip():
            continue
        where, mismatch = f"{path} line {number}", "merges.txt does not match vocab.json"
        pair = _check_merge(line.split(" "), index, where, line, mismatch)
        merges.append(_first_time(pair, where, line, seen, f"line {number}"))
    return merges


def _check_merge_count(count, source):
    """More merges than a vocabulary may hold tokens is a hostile file,
    refused before any is checked (10M merges took 3.5 GiB before)."""
    if count > MAX_TOKENS:
        raise TokenizerError(
            f"{source} lists {count:,} merges; a byte-level BPE has at most one per token of "
            f"its vocabulary, and a vocabulary at most {MAX_TOKENS:,} tokens."
        )


def _first_time(pair, where, text, seen, place):
    """`pair`, noted in `seen` (pair -> `place`, where it is first listed); a merge listed
    twice has two ranks, which transformers and TensorFlow's tables do not
    agree on: a TokenizerError naming both places."""
    if pair in seen:
        raise TokenizerError(
            f"{where}: the merge {text!r} is listed before, at {seen[pair]}; a merge has one "
            "rank, so each is listed once."
        )
    seen[pair] = place
    return pair


def _template(post, path, index):
    """A post-processor -> (cls, sep, separators between a pair's texts,
    trim_offsets), or a TokenizerError naming what is not supported."""
    kind = post.get("type") if isinstance(post, dict) else None

    def refuse(what):
        raise TokenizerError(f"{path}: post_processor {what} is not supported; {SUPPORTED}.")

    def token(entry, name):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            refuse(f"{kind} {name}={json_text(entry)}")
        if index.get(entry[0]) != entry[1]:
            refuse(
                f"{kind} {name}={json_text(entry)} (the vocabulary gives it {index.get(entry[0])})"
            )
        return entry[0]

    if kind == "RobertaProcessing":
        cls, sep = token(post.get("cls"), "cls"), token(post.get("sep"), "sep")
        return cls, sep, 2, bool(post.get("trim_offsets", True))
    if kind == "BertProcessing":
        return token(post.get("cls"), "cls"), token(post.get("sep"), "sep"), 1, False
    if kind != "TemplateProcessing":
        refuse("null (nothing to pack with)" if post is None else json_text(kind))

    def items(name):
        out = []
        for item in post.get(name) or []:
            if isinstance(item, dict) and isinstance(item.get("SpecialToken"), dict):
                out.append(("special", item["SpecialToken"].get("id")))
            elif isinstance(item, dict) and isinstance(item.get("Sequence"), dict):
                out.append(("sequence", item["Sequence"].get("id")))
            else:
                refuse(f"TemplateProcessing {name} item {json_text(item)}")
        return out

    single, pair = items("single"), items("pair")
    shown = " ".join("$" + x if k == "sequence" else str(x) for k, x in single)
    if [k for k, _ in single] != ["special", "sequence", "special"] or single[1][1] != "A":
        refuse(f"TemplateProcessing single {json_text(shown)}")
    cls, sep = single[0][1], single[2][1]
    shown = " ".join("$" + x if k == "sequence" else str(x) for k, x in pair)
    one = [("special", cls), ("sequence", "A"), ("special", sep), ("sequence", "B")]
    if pair == [*one, ("special", sep)]:
        separators = 1
    elif pair == [*one[:3], ("special", sep), one[3], ("special", sep)]:
        separators = 2
    else:
        refuse(f"TemplateProcessing pair {json_text(shown)} with single {cls} $A {sep}")
    specials = post.get("special_tokens") or {}
    for name in (cls, sep):
        ids = (specials.get(name) or {}).get("ids")
        if ids != [index.get(name)]:
            refuse(f"TemplateProcessing special token {name} ids={json_text(ids)}")
    return cls, sep, separators, False


def read_tokenizer_json(data, path):
    """A `tokenizer.json` (parsed) -> the settings of a byte-level BPE: a
    dict of vocabulary, merges, added tokens, normalizer, add_prefix_space,
    trim_offsets, the template's cls, sep and separators, and the model's
    unk token; anything bertzoo does not reproduce is a one-line
    TokenizerError naming it."""

    def refuse(what):
        raise TokenizerError(f"{path}: {what} is not supported; {SUPPORTED}.")

    model = data["model"]
    if model.get("type") != "BPE":
        refuse(f"model {json_text(model.get('type'))}")
    for key, plain in (
        ("dropout", (None, 0, 0.0)),
        ("continuing_subword_prefix", (None, "")),
        ("end_of_word_suffix", (None, "")),
        ("byte_fallback", (None, False)),
        ("ignore_merges", (None, False)),
    ):
        if model.get(key) not in plain:
            refuse(f"model {key}={json_text(model.get(key))}")
    normalizer = data.get("normalizer")
    steps = [normalizer] if normalizer is not None else []
    if isinstance(normalizer, dict) and normalizer.get("type") == "Sequence":
        steps = normalizer.get("normalizers")
    if not isinstance(steps, list) or len(steps) > 1:
        refuse(f"normalizer {json_text(normalizer)}")
    if steps and not (isinstance(steps[0], dict) and steps[0].get("type") == "NFC"):
        refuse(f"normalizer {json_text(steps[0])}")
    pre = data.get("pre_tokenizer")
    if not isinstance(pre, dict) or pre.get("type") != "ByteLevel":
        kind = pre.get("type") if isinstance(pre, dict) else pre
        refuse(f"pre_tokenizer {json_text(kind)}")
    if pre.get("use_regex", True) is not True:
        refuse("pre_tokenizer ByteLevel use_regex=false (no GPT-2 split)")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise TokenizerError(f"{path}: model.vocab must be a non-empty object of token -> id.")
    merged, added = dict(vocab), []
    for i, token in enumerate(data.get("added_tokens") or []):
        content, at = token.get("content"), token.get("id")
        if not isinstance(content, str) or not content or not isinstance(at, int):
            raise TokenizerError(
                f"{path}: added_tokens[{i}] {json_text(token)} has no content or id."
            )
        for option in ("single_word", "rstrip"):
            if token.get(option):
                refuse(f"added token {json_text(content)} {option}=true")
        if vocab.get(content, at) != at:
            raise TokenizerError(
                f"{path}: added token {json_text(content)} has id {at}, the model's vocab "
                f"{vocab[content]}."
            )
        normalized = bool(token.get("normalized", True))
        if steps and normalized and unicodedata.normalize("NFC", content) != content:
            refuse(f"added token {json_text(content)} (normalized, but not in NFC)")
        merged[content] = at
        added.append(
            {"content": content, "lstrip": bool(token.get("lstrip")), "normalized": normalized}
        )
    for normalized in (False, True):
        group = [t for t in added if t["normalized"] == normalized]
        spaced = [t["content"] for t in group if t["content"][0].isspace()]
        stripped = [t["content"] for t in group if t["lstrip"]]
        if spaced and stripped:
            refuse(
                f"added token {json_text(stripped[0])} lstrip=true beside added tokens that "
                f"start with whitespace ({json_text(spaced[0])})"
            )
    vocabulary = _vocabulary_list(merged, path)
    index = {t: i for i, t in enumerate(vocabulary)}
    listed = model.get("merges") or []
    _check_merge_count(len(listed) if isinstance(listed, list) else 0, f"{path}: model.merges")
    merges, seen = [], {}
    for i, merge in enumerate(listed):
        parts = merge.split(" ") if isinstance(merge, str) else merge
        parts = parts if isinstance(parts, list) else [merge]
        where, text = (
            f"{path}: model.merges[{i}]",
            merge if isinstance(merge, str) else " ".join(map(str, parts)),
        )
        pair = _check_merge(parts, index, where, text, "the merges do not match the vocab")
        merges.append(_first_time(pair, where, text, seen, f"model.merges[{i}]"))
    cls, sep, separators, trim = _template(data.get("post_processor"), path, index)
    add_prefix_space = bool(pre.get("add_prefix_space", True))
    unk = model.get("unk_token")
    return {
        "vocabulary": vocabulary,
        "merges": merges,
        "added_tokens": added,
        "normalizer": "NFC" if steps else None,
        "add_prefix_space": add_prefix_space,
        # Pre-split words (tagging): RoBERTa's (two separators between a
        # pair's texts) take a prefix space each (see `tokenize_word_ids`);
        # with another template (ModernBERT's) the reference tokenizes them
        # as its pre-tokenizer says.
        "word_prefix_space": separators == 2 or add_prefix_space,
        "trim_offsets": trim,
        "cls": cls,
        "sep": sep,
        "separators": separators,
        "unk": unk if isinstance(unk, str) else None,
    }


def _role_token(role, given, settings, index, path):
    """The special token of `role` for a tokenizer.json: cls and sep are the
    template's; pad, unk and mask as given when the vocabulary has them,
    else (given RoBERTa's default) the added token named like the role
    ("[PAD]", "<pad>", ...; unk: the model's unk_token first)."""
    if role in ("cls", "sep"):
        token = settings[role]
        if given not in (token, ROBERTA_SPECIALS[role]):
            raise TokenizerError(
                f"{path}: {role}_token={given!r}, but the post-processor packs with {token!r}."
            )
        return token
    if given in index or given != ROBERTA_SPECIALS[role]:
        return given
    names = {f"[{role}]", f"<{role}>"}
    found = [t["content"] for t in settings["added_tokens"] if t["content"].lower() in names]
    if role == "unk" and settings["unk"] in index:
        found.insert(0, settings["unk"])
    if not found:
        raise TokenizerError(
            f"{path} has no {role} token named like [{role.upper()}] or <{role}>: pass "
            f"{role}_token= (one of its added tokens: "
            f"{', '.join(t['content'] for t in settings['added_tokens'][:8]) or 'none'})."
        )
    return found[0]


@register_tokenizer
class ByteLevelBPETokenizer(Tokenizer):
    """Text -> byte-level BPE ids, exactly as Hugging Face's tokenizers over
    the same files: RoBERTa's (`RobertaTokenizerFast` over `vocab.json` and
    `merges.txt`) or a `tokenizer.json` such as ModernBERT's.

    Args:
        vocabulary: path to `vocab.json` or `tokenizer.json` (or the
            directory holding one; vocab.json first). With a vocab.json,
            `merges.txt` is read from the same directory unless `merges`
            names it; a tokenizer.json holds its merges, normaliser,
            pre-tokenizer options, added tokens and template. Or in memory:
            the tokens in id order (or a dict of token -> id), with
            `merges` given.
        merges: path to `merges.txt` (vocab.json only), or the merges in
            rank order ("left right" strings, as `get_config` gives them,
            or pairs).
        add_prefix_space: put a space before the text, as if it followed a
            word (RoBERTa's default: False; a tokenizer.json says it, and a
            different value is an error).
        *_token: the special tokens (RoBERTa's: <s>, </s>, <pad>, <unk>,
            <mask>); all must be in the vocabulary. With a tokenizer.json,
            cls and sep are its template's, and pad, unk and mask left at
            RoBERTa's defaults are its added tokens named like them
            ([PAD], <pad>, ...).

    Sequences are packed as the template says: RoBERTa's `<s> A </s>` and
    `<s> A </s></s> B </s>`, ModernBERT's `[CLS] A [SEP]` and
    `[CLS] A [SEP] B [SEP]`.
    """

    vocabulary_file = "vocab.json"
    companion_files = (MERGES_FILE,)
    kind = "byte_level_bpe"
    pair_truncation = "hf-fast"
    pair_separators = 2
    mask_absorbs = UNICODE_WHITESPACE  # "<mask>" lstrip

    def __init__(
        self,
        vocabulary,
        merges=None,
        add_prefix_space=None,
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        lowercase=False,
        strip_accents=False,
        tokenizer_json=None,
    ):
        if lowercase or strip_accents:
            raise TokenizerError(
                "The byte-level BPE tokenizer does not lowercase or strip accents "
                "(RoBERTa's and ModernBERT's are cased): pass lowercase=False, "
                "strip_accents=False."
            )
        if tokenizer_json is not None:
            # A tokenizer.json's text, as `get_config` gives it: it holds
            # the vocabulary (which must be the one given) and the rest.
            try:
                data = parse_json(tokenizer_json)
            except ValueError as e:
                raise TokenizerError(f"tokenizer_json is not a tokenizer.json: {e}.") from None
            path = None
        elif isinstance(vocabulary, list | tuple | dict):
            data, path = _in_memory_vocabulary(vocabulary), None
        else:
            data, path, raw = _json_file(vocabulary, "Vocabulary")
        roles = dict(cls=cls_token, sep=sep_token, pad=pad_token, unk=unk_token, mask=mask_token)
        if isinstance(data, dict) and isinstance(data.get("model"), dict):  # a tokenizer.json
            if merges is not None:
                raise TokenizerError(
                    f"{path} is a tokenizer.json, which holds its merges: pass no merges=."
                )
            settings = read_tokenizer_json(data, path or "The tokenizer.json")
            if tokenizer_json is not None and list(vocabulary) != settings["vocabulary"]:
                raise TokenizerError(
                    "The vocabulary given is not the one of tokenizer_json: pass the "
                    "tokenizer's own vocabulary with its config."
                )
            if add_prefix_space not in (None, settings["add_prefix_space"]):
                raise TokenizerError(
                    f"{path}: add_prefix_space={add_prefix_space}, but its ByteLevel "
                    f"pre-tokenizer has add_prefix_space={settings['add_prefix_space']}."
                )
            self.vocabulary = settings["vocabulary"]
            index = {t: i for i, t in enumerate(self.vocabulary)}
            roles = {r: _role_token(r, t, settings, index, path) for r, t in roles.items()}
            self.vocabulary_file = TOKENIZER_JSON_FILE
            self._tokenizer_json = raw if path is not None else tokenizer_json.encode("utf-8")
        else:
            vocabulary_list = _vocabulary_list(data, path)
            settings = {
                "vocabulary": vocabulary_list,
                "merges": None,
                # RoBERTa's special tokens, "<mask>" absorbing the whitespace
                # before it (its lstrip).
                "added_tokens": [
                    {"content": t, "lstrip": r == "mask", "normalized": False}
                    for r, t in roles.items()
                ],
                "normalizer": None,
                "add_prefix_space": bool(add_prefix_space),
                "word_prefix_space": True,
                "trim_offsets": True,
                "separators": 2,
            }
            self.vocabulary = vocabulary_list
        super().__init__(*(roles[r] for r in ("cls", "sep", "pad", "unk", "mask")))
        self.lowercase = False
        self.strip_accents = False
        self.add_prefix_space = settings["add_prefix_space"]
        self.word_prefix_space = settings["word_prefix_space"]
        self.normalizer = settings["normalizer"]
        self.trim_offsets = settings["trim_offsets"]
        self.pair_separators = settings["separators"]
        self._check_special_tokens(path or "The vocabulary")
        if settings["merges"] is None:
            if merges is None and path is None:
                raise TokenizerError(
                    "A byte-level BPE vocabulary given in memory needs its merges (merges=)."
                )
            # merges.txt beside vocab.json, a path, or the merges themselves.
            source = Path(path).parent / MERGES_FILE if merges is None else merges
            settings["merges"] = read_merges(source, self._index)
        self.merges = settings["merges"]
        byte_chars = bytes_to_unicode()
        missing = [c for c in byte_chars.values() if c not in self._index]
        if missing:
            raise TokenizerError(
                f"{path or 'The vocabulary'} lacks {len(missing)} of the 256 byte characters of a byte-level "
                f"BPE (e.g. {missing[0]!r}); is it a GPT-2/RoBERTa vocabulary?"
            )
        # Added tokens, each pass's longest first (leftmost-longest matches).
        tokens = {}
        for token in settings["added_tokens"]:
            tokens[token["content"]] = token  # the last entry of a repeated one
        self.added_tokens = sorted(
            tokens.values(), key=lambda t: (-len(t["content"]), t["content"])
        )
        self._patterns = tuple(
            _alternation([t for t in self.added_tokens if t["normalized"] == n]) for n in (0, 1)
        )
        self._lstrip = tuple(
            any(t["lstrip"] for t in self.added_tokens if t["normalized"] == n) for n in (0, 1)
        )
        self._byte_chars = tf.constant([byte_chars[b] for b in range(256)])
        self._byte_of = {c: b for b, c in byte_chars.items()}
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
        # Added tokens read as themselves (token_text).
        self._special_set = {t["content"] for t in self.added_tokens}
        self._graphs = _Graphs()

    @property
    def adds_prefix_space(self):
        return self.add_prefix_space

    def token_text(self, token_id):
        """The token's bytes as UTF-8 text ("Ġcat" -> " cat"); a token
        holding part of a character's bytes gives U+FFFD for it, as the
        reference's decoder does. Special tokens read as themselves."""
        token = self.id_to_token(token_id)
        if token in self._special_set or not all(c in self._byte_of for c in token):
            return token  # a special token, or one of other characters (an added token)
        return bytes(self._byte_of[c] for c in token).decode("utf-8", errors="replace")

    def get_config(self):
        # The merges ride along, so that the vocabulary and this config
        # rebuild the tokenizer (corpus preparation's workers, serving); a
        # tokenizer.json's pipeline (added tokens, normaliser, template)
        # rides along whole.
        if self.vocabulary_file == TOKENIZER_JSON_FILE:
            return {"tokenizer_json": self._tokenizer_json.decode("utf-8")}
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
        if self.vocabulary_file == TOKENIZER_JSON_FILE:
            section["vocabulary_file"] = TOKENIZER_JSON_FILE
        return section

    # --- steps 1-3: added tokens, normaliser, pieces ---

    def _pieces(self, strings, prefix_space):
        """`split_pieces` with this tokenizer's added tokens and normaliser."""
        return split_pieces(strings, self._patterns, prefix_space, self.normalizer)

    # --- steps 4-5: bytes and merges ---

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
        tokens, rows = self._tokens(strings)[:2]
        return tf.RaggedTensor.from_value_rowids(tokens, rows, tf.size(strings, tf.int64))

    def _tokens(self, strings, details=False, prefix_space=None):
        """Every token of a 1-D string batch, flat in text order: (token
        strings, their text's row); with `details` also the units of
        `_pieces` and, per token, its unit and whether it is an added
        token. A unit is a pre-tokenized piece or an added token.
        `prefix_space`: None for the tokenizer's `add_prefix_space`."""
        if prefix_space is None:
            prefix_space = self.add_prefix_space
        units = self._pieces(strings, prefix_space)
        text, added = units["text"], units["added"]
        words, which = tf.unique(tf.boolean_mask(text, ~added), out_idx=tf.int64)
        bpe = tf.gather(self._run(self._bpe, words), which)  # [plain units, (tokens)]
        # An added token's text, less the whitespace its lstrip absorbed (in
        # a pass with lstrip tokens, no token starts with whitespace).
        stripped = tf.zeros_like(added)
        if self._lstrip[0]:
            stripped |= units["stretch"] < 0
        if self._lstrip[1]:
            stripped |= units["stretch"] >= 0
        own = tf.where(stripped, tf.strings.regex_replace(text, f"^{_WS}+", ""), text)
        own = tf.boolean_mask(own, added)
        merged = tf.concat([bpe, tf.RaggedTensor.from_tensor(own[:, None])], 0)
        plain_at, added_at = tf.where(~added)[:, 0], tf.where(added)[:, 0]
        order = tf.math.invert_permutation(tf.concat([plain_at, added_at], 0))
        merged = tf.gather(merged, order)  # [units, (tokens)], in text order
        unit_of = merged.value_rowids()
        out = (merged.flat_values, tf.gather(units["row"], unit_of))
        if details:
            out += (units, unit_of, tf.gather(merged.row_splits, unit_of))
        return out

    @tf.autograph.experimental.do_not_convert
    def tokenize_ids(self, strings):
        strings = tf.convert_to_tensor(strings, tf.string)
        return self._tokenize_ids(strings)

    def _tokenize_ids(self, strings, prefix_space=None):
        tokens, rows = self._tokens(strings, prefix_space=prefix_space)[:2]
        ids = self._ids.lookup(tokens)
        return tf.RaggedTensor.from_value_rowids(ids, rows, tf.size(strings, tf.int64))

    @tf.autograph.experimental.do_not_convert
    def tokenize_word_ids(self, words):
        """Pre-split words -> ids as transformers gives them with
        `is_split_into_words=True`. RoBERTa's (vocab.json, or a
        tokenizer.json whose template puts two separators between a pair's
        texts, as RobertaProcessing does): as `RobertaTokenizerFast`
        with `add_prefix_space=True`, every word as if a space came before
        it ("Ġword"), as words in the middle of a sentence were in
        pre-training, whatever this tokenizer's own `add_prefix_space`.
        That is how transformers' token-classification example loads
        RoBERTa's tokenizer (transformers 4 refuses pre-split words without
        the option; 5 tokenizes each word bare, in the form pre-training saw
        only at the start of a text). Another template's (ModernBERT's
        tokenizer.json): as its pre-tokenizer's `add_prefix_space` says
        (ModernBERT's: False, each word bare: "cat" -> "c", "at"), which is
        what transformers gives for it, with or without that option, and
        what its token-classification example trains on. Special tokens
        typed in a word are matched first, as in `tokenize_ids`."""
        words = tf.convert_to_tensor(words, tf.string)
        return self._tokenize_ids(words, prefix_space=self.word_prefix_space)

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
        character. With `trim_offsets` (RoBERTa's post-processor) a token's
        span moves past its leading spaces ("Ġ") and before its trailing
        ones (a token of spaces only gets an empty span at its end), and an
        added token spans its own text ("<mask>" without the whitespace it
        absorbed); without (ModernBERT's template) spans are not trimmed.
        The spans follow the reference for `add_prefix_space=False`; with
        True, a word's added space has no bytes and the span starts at the
        word. Where NFC changes a text (composes or reorders characters), a
        token's span covers the whole of each changed sequence it touches
        ("e" + U+0301 -> "é": both characters), where the reference's
        covers the first character only: the spans hold the reference's."""
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
        tokens, rows, units, unit_of, first = self._tokens(strings, True)
        ids = self._ids.lookup(tokens)
        added = tf.gather(units["added"], unit_of)
        unit_start = tf.gather(units["start"], unit_of)
        unit_end = tf.gather(units["end"], unit_of)
        stretch = tf.gather(units["stretch"], unit_of)
        # Each token's bytes within its unit: a byte-level token has one
        # character per byte.
        size = tf.cast(tf.strings.length(tokens, unit="UTF8_CHAR"), tf.int64)
        within = tf.cumsum(size, exclusive=True)
        within -= tf.gather(within, first)  # from the unit's first token
        start = unit_start + within
        end = start + size
        # Added tokens span their unit, or (trimmed) their own text at its end.
        own = tf.cast(tf.strings.length(tokens), tf.int64)
        start = tf.where(added, unit_end - own if self.trim_offsets else unit_start, start)
        end = tf.where(added, unit_end, end)
        # Whole characters of the stretch's (normalised) text: the start of
        # the character holding the first byte, the end of the one holding
        # the last (over the stretches' bytes laid end to end).
        text = units["stretch_text"]
        lengths = tf.cast(tf.strings.length(text), tf.int64)
        base = tf.cumsum(lengths, exclusive=True)
        _, char_starts = tf.strings.unicode_decode_with_offsets(
            text, "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        char_starts = char_starts.with_flat_values(tf.cast(char_starts.flat_values, tf.int64))
        bounds = tf.sort(tf.concat([(char_starts + base[:, None]).flat_values, base + lengths], 0))
        bounds = tf.concat([bounds, [tf.int64.max]], 0)  # (never empty)
        in_stretch = stretch >= 0
        text_base = _at(base, stretch)
        last = tf.size(bounds, tf.int64) - 1
        at_start = tf.searchsorted(bounds, text_base + start, side="right", out_type=tf.int64)
        at_start = tf.clip_by_value(at_start - 1, 0, last)
        at_end = tf.searchsorted(bounds, text_base + end - 1, side="right", out_type=tf.int64)
        at_end = tf.clip_by_value(at_end, 0, last)
        widen = in_stretch & ~added
        start = tf.where(widen, tf.gather(bounds, at_start) - text_base, start)
        end = tf.where(widen, tf.gather(bounds, at_end) - text_base, end)
        # From the stretch's normalised text to the text.
        if self.normalizer == "NFC":
            start, end = _source_offsets(units["nfc"], stretch, start, end)
        shift = _at(units["stretch_start"], stretch)
        start = tf.where(in_stretch, start + shift, start)
        end = tf.where(in_stretch, end + shift, end)
        if self.trim_offsets:
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
        if self.vocabulary_file == TOKENIZER_JSON_FILE:
            # The file it was read from, byte for byte: transformers reads
            # it back as it did the original.
            with atomic_path(path) as tmp:
                Path(tmp).write_bytes(self._tokenizer_json)
            return
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


def split_pieces(strings, patterns, prefix_space=False, normalizer=None):
    """A 1-D string batch -> its units in text order, each a
    pre-tokenized piece or an added token: a dict of flat tensors
    `text`, `added` (bool), `row` (the text it comes from), `start` and
    `end` (byte offsets: in the text for the added tokens of the first
    pass, in the normalised text of its stretch for the others),
    `stretch` (that stretch's index, -1 for the first pass's tokens);
    and of the stretches the first pass leaves: `stretch_text`
    (normalised), `stretch_start` (byte offset in its text) and `nfc`
    (what `_source_offsets` needs; None without a normaliser).
    `patterns`: the RE2 patterns of the added tokens matched in the raw
    text and in the normalised text (None: none); `normalizer`: None or
    "NFC". `prefix_space`: put a space before every stretch that does not
    start with one (`add_prefix_space`)."""
    raw_pattern, normalized_pattern = patterns
    stretches, s_row, s_start, s_end = _split_or_whole(strings, raw_pattern)
    added = _matches(stretches, raw_pattern)
    plain = tf.where(~added)[:, 0]
    raw = tf.gather(stretches, plain)
    text, nfc = _library_nfc(raw) if normalizer == "NFC" else (raw, None)
    # The second pass, on each stretch's normalised text.
    subs, g_row, g_start, g_end = _split_or_whole(text, normalized_pattern)
    sub_added = _matches(subs, normalized_pattern)
    added_at = tf.where(added)[:, 0]
    item_stretch, order = _in_order(tf.gather(plain, g_row), added_at)
    item_text = tf.gather(tf.concat([subs, tf.gather(stretches, added_at)], 0), order)
    item_added = tf.gather(tf.concat([sub_added, tf.ones_like(added_at, tf.bool)], 0), order)
    item_plain = tf.gather(tf.concat([g_row, -tf.ones_like(added_at)], 0), order)
    item_start = tf.gather(tf.concat([g_start, tf.gather(s_start, added_at)], 0), order)
    item_end = tf.gather(tf.concat([g_end, tf.gather(s_end, added_at)], 0), order)
    # Pieces of the text between added tokens.
    p_items = tf.where(~item_added)[:, 0]
    p_text = tf.gather(item_text, p_items)
    shift = tf.zeros_like(p_items)
    if prefix_space:
        add = ~tf.strings.regex_full_match(p_text, "(?s) .*")
        p_text = tf.where(add, tf.strings.join([" ", p_text]), p_text)
        shift = tf.cast(add, tf.int64)
    # Segments, which no piece crosses (module docstring, step 3).
    segment = f"{_WS}{_NOT_WS}+"
    segments, g2_row, g2_start, _ = _split(p_text, segment, segment)
    pieces, p_row, p_start, p_end = _split(segments, PIECE_PATTERN, PIECE_PATTERN)
    # Offsets in the item (a prefix space has none).
    base = tf.gather(g2_start, p_row) - tf.gather(shift, tf.gather(g2_row, p_row))
    p_start, p_end = tf.maximum(base + p_start, 0), tf.maximum(base + p_end, 0)
    # Units: the pieces and the added tokens, ordered by item.
    a_items = tf.where(item_added)[:, 0]
    unit_item, order = _in_order(tf.gather(p_items, tf.gather(g2_row, p_row)), a_items)
    unit_text = tf.gather(tf.concat([pieces, tf.gather(item_text, a_items)], 0), order)
    is_added = tf.gather(
        tf.concat([tf.zeros_like(p_row, tf.bool), tf.ones_like(a_items, tf.bool)], 0), order
    )
    zeros = tf.zeros_like(a_items)
    a_size = tf.gather(item_end - item_start, a_items)
    offset = tf.gather(item_start, unit_item)
    return {
        "text": unit_text,
        "added": is_added,
        "row": tf.gather(s_row, tf.gather(item_stretch, unit_item)),
        "start": offset + tf.gather(tf.concat([p_start, zeros], 0), order),
        "end": offset + tf.gather(tf.concat([p_end, a_size], 0), order),
        "stretch": tf.gather(item_plain, unit_item),
        "stretch_text": text,
        "nfc": nfc,
        "stretch_start": tf.gather(s_start, plain),
    }


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


def _quote(token):
    return "".join(c if c.isalnum() else f"\\x{{{ord(c):x}}}" for c in token)


def _split_or_whole(strings, pattern):
    """`_split(strings, pattern, pattern)`; without a pattern, the non-empty
    strings whole."""
    if pattern is not None:
        return _split(strings, pattern, pattern)
    lengths = tf.cast(tf.strings.length(strings), tf.int64)
    keep = tf.where(lengths > 0)[:, 0]
    return tf.gather(strings, keep), keep, tf.zeros_like(keep), tf.gather(lengths, keep)


def _matches(strings, pattern):
    """Which of `strings` are a match of `pattern` (an added token)."""
    if pattern is None:
        return tf.zeros_like(strings, tf.bool)
    return tf.strings.regex_full_match(strings, pattern)


def _at(values, index):
    """`values[index]`, 0 where the index is -1 (`values` may be empty)."""
    padded = tf.concat([values, tf.zeros([1], values.dtype)], 0)
    return tf.gather(padded, tf.where(index >= 0, index, tf.size(values, index.dtype)))


def _in_order(first, second):
    """(the keys `first` and `second` concatenated, sorted; the order that
    sorts them), `first`'s before `second`'s among equal keys."""
    keys = tf.concat([first, second], 0)
    order = tf.argsort(keys, stable=True)
    return tf.gather(keys, order), order


def _alternation(tokens):
    """An RE2 pattern matching any of the added `tokens` (already longest
    first, so that RE2's leftmost-first choice is the reference's
    leftmost-longest); an lstrip token with the whitespace before it.
    None without tokens."""
    if not tokens:
        return None
    return "|".join(f"{_WS}*" * t["lstrip"] + _quote(t["content"]) for t in tokens)


@functools.cache
def _inert_runs():
    """An RE2 pattern of a run of the code points the library's NFC leaves
    alone and never reorders or composes across (hf_nfc_tables.json)."""
    try:
        data = json.loads(NFC_TABLES_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RuntimeError(
            f"bertzoo's tokenizer tables {NFC_TABLES_FILE} cannot be read: {e}"
        ) from e
    return "[^" + "".join(f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in data["active"]) + "]+"


def _library_nfc(raw):
    """The Rust library's NFC of each stretch of `raw` (module docstring,
    step 2): ICU's, except where that changes a stretch, which is then
    normalised run by run of the code points the library knows (its older
    Unicode version leaves newer marks alone). Returns (the normalised
    stretches, what `_source_offsets` needs to map offsets back)."""
    icu = tf_text.normalize_utf8(raw, "NFC")
    changed = tf.where(tf.not_equal(icu, raw))[:, 0]
    inert = _inert_runs()
    pieces, starts, ends = regex_pieces(tf.gather(raw, changed), inert, inert)
    is_inert = tf.strings.regex_full_match(pieces, inert)
    normalized = tf.where(is_inert, pieces, tf_text.normalize_utf8(pieces, "NFC"))
    joined = tf.strings.reduce_join(starts.with_flat_values(normalized), axis=1)
    text = tf.tensor_scatter_nd_update(raw, changed[:, None], joined)
    lengths = tf.cast(tf.strings.length(normalized), tf.int64)
    normalized_starts = starts.with_flat_values(lengths)
    normalized_starts = tf.cumsum(normalized_starts, axis=1, exclusive=True)
    info = {
        "changed": changed,
        "size": tf.size(raw, tf.int64),
        "pieces": pieces,
        "inert": is_inert,
        "piece_stretch": tf.gather(changed, starts.value_rowids()),
        "raw_start": tf.cast(starts.flat_values, tf.int64),
        "start": normalized_starts.flat_values,
    }
    return text, info


def _source_offsets(nfc, stretch, start, end):
    """Byte offsets in the NFC-normalised stretches -> in the stretches as
    they were: unchanged where NFC changed nothing; else through the run
    they fall in, by ICU's alignment, which maps each normalised chunk (a
    composed or reordered sequence) to the characters it came from: a start
    goes to its chunk's first character, an end past its chunk's last.
    Offsets outside a stretch (-1) pass as they are."""
    changed = tf.zeros([nfc["size"] + 1], tf.bool)
    changed = tf.tensor_scatter_nd_update(
        changed, nfc["changed"][:, None], tf.ones_like(nfc["changed"], tf.bool)
    )
    inside = tf.where(tf.gather(changed, tf.where(stretch >= 0, stretch, nfc["size"])))[:, 0]
    # Every run's character boundaries (and end) in its normalised text,
    # with their source offsets in the run.
    # One more run ("a", after the others: its keys sort last and no offset
    # maps through it): `find_source_offsets` crashes the process on an
    # empty batch, which a batch that NFC leaves as it is would give.
    pieces = tf.concat([nfc["pieces"], ["a"]], 0)
    is_inert = tf.concat([nfc["inert"], [False]], 0)
    normalized, offsets_map = tf_text.normalize_utf8_with_offsets_map(pieces, "NFC")
    normalized = tf.where(is_inert, pieces, normalized)
    _, char_starts = tf.strings.unicode_decode_with_offsets(normalized, "UTF-8", errors="replace")
    lengths = tf.cast(tf.strings.length(normalized), tf.int64)[:, None]
    bounds = tf.concat(
        [char_starts.with_flat_values(tf.cast(char_starts.flat_values, tf.int64)), lengths], axis=1
    )
    row = bounds.value_rowids()
    at = bounds.flat_values
    source = tf_text.find_source_offsets(offsets_map, bounds).flat_values
    source = tf.where(tf.gather(is_inert, row), at, source)
    # A boundary inside a chunk has the source offset of the chunk's end.
    same_row = tf.equal(row[1:], row[:-1])
    inner = tf.concat([same_row & tf.equal(source[1:], source[:-1]), [False]], 0)
    first = tf.concat([[True], ~same_row], 0)
    chunk = first | ~inner
    chunk_start = tf.gather(tf.boolean_mask(source, chunk), tf.cumsum(tf.cast(chunk, tf.int64)) - 1)
    keys = row * 2**32 + at
    run_keys = nfc["piece_stretch"] * 2**32 + nfc["start"]

    def mapped(values, table):
        x = tf.gather(values, inside)
        query = tf.gather(stretch, inside) * 2**32 + x
        run = tf.searchsorted(run_keys, query, side="right", out_type=tf.int64) - 1
        local = x - tf.gather(nfc["start"], run)
        k = tf.searchsorted(keys, run * 2**32 + local, out_type=tf.int64)
        result = tf.gather(table, k) + tf.gather(nfc["raw_start"], run)
        return tf.tensor_scatter_nd_update(values, inside[:, None], result)

    return mapped(start, chunk_start), mapped(end, source)


# RoBERTa's special tokens as added tokens ("<mask>" absorbs the whitespace
# before it, its lstrip), and `split_pieces`' patterns for them: what the
# vocabulary trainer (`bertzoo.tokenizers.train_bpe`) pre-tokenizes with.
ROBERTA_ADDED_TOKENS = sorted(
    (
        {"content": t, "lstrip": t == "<mask>", "normalized": False}
        for t in ("<s>", "</s>", "<pad>", "<unk>", "<mask>")
    ),
    key=lambda t: (-len(t["content"]), t["content"]),
)
ROBERTA_SPECIAL_PATTERNS = (_alternation(ROBERTA_ADDED_TOKENS), None)
