"""Tokenizer settings in Hugging Face's `tokenizer_config.json` form, both
ways: a checkpoint directory's settings as a preset's `tokenizer` section,
and a bertzoo tokenizer's settings as `tokenizer_config.json`."""

import base64
import binascii
import inspect
import json
import logging
import struct
from pathlib import Path

from bertzoo.io.bounded import TOKENIZER_BYTES, read_bounded
from bertzoo.io.jsonfile import read_json_object
from bertzoo.tokenizers.kinds import SPECIAL_ROLES, TokenizerError, tokenizer_class, tokenizer_kinds

logger = logging.getLogger(__name__)

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TOKENIZER_JSON_FILE = "tokenizer.json"
# bertzoo's own key in a tokenizer_config.json it writes: the WordPiece
# reference implementation (`bertzoo.tokenizers.basic.REFERENCES`), so that
# the directory loads back with the tokenizer it was trained with.
REFERENCE_KEY = "bertzoo_tokenizer_reference"


def _tokenizer_json_added_tokens(path):
    """The added tokens of a BERT `tokenizer.json`, after checking that the
    rest of it is what bertzoo's "hf-fast" reference reproduces (anything
    else is a TokenizerError naming it). Its normaliser's lowercase and
    strip_accents do not count: transformers replaces them with
    `tokenizer_config.json`'s `do_lower_case` (default true) and
    `strip_accents`."""
    data = read_json_object(path, TokenizerError, TOKENIZER_BYTES, "tokenizer file")

    def part(name, expected):
        value = data.get(name) or {}
        if value.get("type") != expected:
            raise TokenizerError(
                f"{path}: the {name} is {value.get('type')!r}; bertzoo reproduces BERT's "
                f"tokenizer.json ({expected}). Pass reference='hf-python' or 'google' to "
                "tokenize with a Python reference instead."
            )
        return value

    normalizer = part("normalizer", "BertNormalizer")
    part("pre_tokenizer", "BertPreTokenizer")
    model = part("model", "WordPiece")
    unsupported = {
        "normalizer clean_text": normalizer.get("clean_text", True) is not True,
        "normalizer handle_chinese_chars": normalizer.get("handle_chinese_chars", True) is not True,
        "model continuing_subword_prefix": model.get("continuing_subword_prefix", "##") != "##",
        "model max_input_chars_per_word": model.get("max_input_chars_per_word", 100) != 100,
    }
    for token in data.get("added_tokens") or []:
        for option in ("lstrip", "rstrip", "single_word", "normalized"):
            if token.get(option):
                unsupported[f"added token {token.get('content')!r} {option}"] = True
    bad = [name for name, is_bad in unsupported.items() if is_bad]
    if bad:
        raise TokenizerError(
            f"{path}: bertzoo's 'hf-fast' tokenizer does not reproduce {', '.join(bad)} "
            "(it supports BERT's defaults). Pass reference='hf-python' or 'google' to "
            "tokenize with a Python reference instead."
        )
    return [t["content"] for t in data.get("added_tokens") or [] if isinstance(t, dict)]


# transformers tokenizer classes (without "Fast") -> bertzoo tokenizer kind.
HF_TOKENIZER_KINDS = {
    "BertTokenizer": "wordpiece",
    "DistilBertTokenizer": "wordpiece",
    "AlbertTokenizer": "sentencepiece",
    "RobertaTokenizer": "byte_level_bpe",
    "XLMRobertaTokenizer": "fairseq_sentencepiece",
}
# The transformers class written for a kind when the model type's own
# tokenizer class is of another kind.
_HF_CLASS_OF_KIND = {
    "wordpiece": "BertTokenizer",
    "sentencepiece": "AlbertTokenizer",
    "byte_level_bpe": "RobertaTokenizer",
    "fairseq_sentencepiece": "XLMRobertaTokenizer",
}
# XLM-R's special tokens (fixed by fairseq's ids).
XLMR_SPECIALS = {
    "bos": "<s>",
    "cls": "<s>",
    "eos": "</s>",
    "sep": "</s>",
    "pad": "<pad>",
    "unk": "<unk>",
    "mask": "<mask>",
}
_XLMR_SUPPORTED = (
    "bertzoo reproduces transformers' XLMRobertaTokenizer built from sentencepiece.bpe.model "
    "(cased, add_prefix_space true, no sampling, special tokens "
    + ", ".join(dict.fromkeys(XLMR_SPECIALS.values()))
    + ")"
)


def _check_xlmr_config(path, tok):
    """A one-line TokenizerError for XLM-R tokenizer_config.json options that
    bertzoo's XLMRobertaTokenizer does not reproduce."""
    bad = []
    if tok.get("do_lower_case"):
        bad.append("do_lower_case=true")
    if tok.get("add_prefix_space", True) is not True:
        bad.append(f"add_prefix_space={json_text(tok['add_prefix_space'])}")
    if tok.get("sp_model_kwargs"):
        bad.append(f"sp_model_kwargs={json_text(tok['sp_model_kwargs'])}")
    if tok.get("split_special_tokens"):
        bad.append("split_special_tokens=true")
    for role, default in XLMR_SPECIALS.items():
        token = tok.get(f"{role}_token")
        if isinstance(token, dict):
            for option in ("single_word", "normalized"):
                if token.get(option):
                    bad.append(f"{role}_token {option}=true")
            token = token.get("content")
        if token is not None and token != default:
            bad.append(f"{role}_token={json_text(token)}")
    for token in (tok.get("added_tokens_decoder") or {}).values():
        content = token.get("content") if isinstance(token, dict) else token
        if content not in XLMR_SPECIALS.values():
            bad.append(f"added token {json_text(content)}")
    if bad:
        raise TokenizerError(f"{path}: {', '.join(bad)} not supported; {_XLMR_SUPPORTED}.")


# The pre-tokenizer transformers 5's XLMRobertaTokenizer builds.
_XLMR_PRE_TOKENIZER = "WhitespaceSplit + Metaspace(prepend_scheme always)"


def _precompiled_charsmap(normalizer):
    """The Precompiled charsmap (bytes) of a tokenizer.json normalizer, alone
    or in a Sequence, as transformers 5 takes it; None if it has none."""
    steps = normalizer.get("normalizers") if normalizer.get("type") == "Sequence" else [normalizer]
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict) and step.get("type") == "Precompiled":
            try:
                return base64.b64decode(step.get("precompiled_charsmap") or "", validate=True)
            except (binascii.Error, TypeError):
                return None
    return None


def _is_xlmr_pre_tokenizer(pre):
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"}
    return (
        isinstance(steps, list)
        and len(steps) == 2
        and steps[0].get("type") == "WhitespaceSplit"
        and all(steps[1].get(k) == v for k, v in metaspace.items())
        and steps[1].get("split", True) is True
    )


def _check_xlmr_tokenizer_json(path):
    """A one-line TokenizerError if `tokenizer.json` holds something that
    transformers 5 tokenizes with and bertzoo does not reproduce.

    transformers 5's XLMRobertaTokenizer builds its own pipeline (WhitespaceSplit
    + Metaspace pre-tokenizer, `<s> A </s></s> B </s>`) and takes from the
    file only its Unigram vocabulary, the Precompiled charsmap of its
    normaliser (alone or in a Sequence) and its added tokens. So those are
    checked, the first two against the `sentencepiece.bpe.model` beside it
    (which bertzoo tokenizes with); another pre-tokenizer is ignored, as
    transformers 5 ignores it, with a log line: transformers 4 wrote a lone
    Metaspace for the released checkpoints, which its fast tokenizer ran
    (a "▁" token for each extra space)."""
    data = read_json_object(path, TokenizerError, TOKENIZER_BYTES, "tokenizer file")
    normalizer = data.get("normalizer") or {}
    pre = data.get("pre_tokenizer") or {}
    model = data.get("model") or {}
    spm_path = Path(path).parent / "sentencepiece.bpe.model"
    proto = _sentencepiece_model(spm_path)
    bad = []
    charsmap = _precompiled_charsmap(normalizer)
    if charsmap is None:
        bad.append(f"normalizer {json_text(normalizer.get('type'))} without a Precompiled charsmap")
    elif proto is not None and charsmap != proto.normalizer_spec.precompiled_charsmap:
        bad.append(f"a normalizer charsmap other than {spm_path.name}'s")
    if model.get("type") != "Unigram" or model.get("byte_fallback"):
        bad.append(
            f"model {json_text(model.get('type'))} byte_fallback={model.get('byte_fallback')}"
        )
    elif proto is not None:
        problem = _xlmr_vocabulary_problem(model.get("vocab"), proto, spm_path.name)
        if problem:
            bad.append(problem)
    for token in data.get("added_tokens") or []:
        if token.get("content") not in XLMR_SPECIALS.values():
            bad.append(f"added token {json_text(token.get('content'))}")
        for option in ("single_word", "normalized"):
            if token.get(option):
                bad.append(f"added token {json_text(token.get('content'))} {option}=true")
    if bad:
        raise TokenizerError(
            f"{path}: {', '.join(bad)} not supported; {_XLMR_SUPPORTED}: normalizer "
            f"Precompiled, Unigram model, the vocabulary of {spm_path.name}. Remove "
            "tokenizer.json to tokenize from sentencepiece.bpe.model."
        )
    if not _is_xlmr_pre_tokenizer(pre):
        logger.info(
            "%s: its pre_tokenizer %.120s is not the one transformers 5 builds for XLM-R (%s); "
            "transformers 5 ignores it, and so does bertzoo (transformers 4 tokenized with it: "
            "a lone Metaspace gives a token for each extra space).",
            path,
            json_text(pre),
            _XLMR_PRE_TOKENIZER,
        )


def _sentencepiece_model(path):
    """The parsed SentencePiece model at `path`, or None when there is none
    or it does not parse (the tokenizer itself then says what is wrong).
    sentencepiece's protobuf module is imported here, as the XLM-R
    tokenizer this check precedes imports it."""
    if not path.is_file():
        return None
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    data = read_bounded(path, TOKENIZER_BYTES, "SentencePiece model", TokenizerError)
    try:
        model.ParseFromString(data)
    except Exception:  # protobuf's DecodeError, whose module path varies
        return None
    return model


def _xlmr_vocabulary_problem(vocab, proto, name):
    """What differs between a tokenizer.json Unigram vocabulary ([piece,
    score] pairs) and the fairseq ids of the SentencePiece model `proto`
    (<s> <pad> </s> <unk>, piece i at i + 1, <mask> last), or None."""
    pieces = proto.pieces
    if not isinstance(vocab, list) or len(vocab) != len(pieces) + 2:
        count = len(vocab) if isinstance(vocab, list) else 0
        return f"a vocabulary of {count} pieces ({name} gives {len(pieces) + 2})"
    for i in range(3, len(pieces)):
        entry, own = vocab[i + 1], pieces[i]
        ok = isinstance(entry, list) and len(entry) == 2 and entry[0] == own.piece
        # Scores are float32 in the model, written out as float64.
        ok = ok and isinstance(entry[1], int | float) and not isinstance(entry[1], bool)
        if not ok or struct.unpack("<f", struct.pack("<f", entry[1]))[0] != own.score:
            return (
                f"vocabulary entry {i + 1} {json_text(entry)} ({name} has "
                f"{json_text([own.piece, own.score])})"
            )
    return None


def json_text(value):
    """`value` as compact JSON, for messages."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def special_token_defaults(kind):
    """Role ("cls", "sep", ...) -> the default token string of `kind`'s
    tokenizer class."""
    params = inspect.signature(tokenizer_class(kind).__init__).parameters
    return {role: params[f"{role}_token"].default for role in SPECIAL_ROLES}


def hf_tokenizer_section(directory, default_kind, reference=None, check=True):
    """The preset `tokenizer` section of a Hugging Face checkpoint directory,
    from its `tokenizer_config.json` if present.

    WordPiece (BERT, DistilBERT): `do_lower_case` (default true) and
    `strip_accents` (null follows `do_lower_case`, as in transformers).
    SentencePiece (ALBERT): `do_lower_case` (default true) and `keep_accents`
    (default false). A `tokenizer_class` naming a WordPiece or SentencePiece
    tokenizer overrides `default_kind`, the model type's usual kind (e.g.
    Korean ALBERT checkpoints that ship a `vocab.txt` and `BertTokenizer`).

    WordPiece `reference`: the one bertzoo recorded in the file, else
    "hf-fast" (transformers' Rust tokenizer, whose `tokenizer.json` is
    checked and gives its added tokens); `reference` given overrides it.
    `check=False` (a backbone's record, which tokenizes nothing) skips the
    tokenizer.json check: an unusual one does not stop a model loading.
    """
    tok_path = Path(directory) / TOKENIZER_CONFIG_FILE
    tok = read_json_object(tok_path, TokenizerError) if tok_path.is_file() else {}
    lowercase = bool(tok.get("do_lower_case", True))
    kind = HF_TOKENIZER_KINDS.get(
        str(tok.get("tokenizer_class") or "").removesuffix("Fast"), default_kind
    )
    if kind not in tokenizer_kinds():
        # A kind recorded but not (yet) implemented (RoBERTa's byte-level
        # BPE, XLM-R's SentencePiece with fairseq ids): the model loads;
        # tokenizing with it is an error that names the implemented kinds.
        if check:
            tokenizer_class(kind)
        return {"kind": kind}
    if kind == "fairseq_sentencepiece":
        if check:
            _check_xlmr_config(tok_path, tok)
            fast = Path(directory) / TOKENIZER_JSON_FILE
            if fast.is_file():
                _check_xlmr_tokenizer_json(fast)
        return {"kind": kind}
    extra = {}
    if kind == "byte_level_bpe":
        # RoBERTa: cased, no accent stripping; add_prefix_space (default
        # false) is its one setting. ModernBERT ships only a tokenizer.json,
        # which says everything (its tokenizer_config.json names the roles).
        section = {"kind": kind}
        directory = Path(directory)
        if not (directory / "vocab.json").is_file() and (directory / TOKENIZER_JSON_FILE).is_file():
            section["vocabulary_file"] = TOKENIZER_JSON_FILE
        elif tok.get("add_prefix_space"):
            section["add_prefix_space"] = True
        return _with_special_tokens(section, tok, kind)
    if kind == "sentencepiece":
        strip = not bool(tok.get("keep_accents", False))
    else:
        strip = tok.get("strip_accents")
        strip = lowercase if strip is None else bool(strip)
        fast = Path(directory) / TOKENIZER_JSON_FILE
        if reference is not None:  # the caller's override
            extra["reference"] = reference
        elif REFERENCE_KEY in tok:  # written by bertzoo: the preset's own
            extra["reference"] = tok[REFERENCE_KEY]
        else:
            # transformers tokenizes with its Rust tokenizer: the one in
            # tokenizer.json, or one it builds from vocab.txt and the settings.
            extra["reference"] = "hf-fast"
        if extra["reference"] == "hf-fast" and fast.is_file():
            try:
                extra["added_tokens"] = _tokenizer_json_added_tokens(fast)
            except TokenizerError:
                if check:
                    raise
    section = _with_special_tokens(
        {"kind": kind, "lowercase": lowercase, "strip_accents": strip}, tok, kind
    )
    if extra.get("added_tokens"):
        # The added tokens beyond the special ones (which are matched anyway).
        specials = {section.get(f"{r}_token", d) for r, d in special_token_defaults(kind).items()}
        extra["added_tokens"] = [t for t in extra["added_tokens"] if t not in specials]
    section.update({k: v for k, v in extra.items() if v or k != "added_tokens"})
    return section


def _with_special_tokens(section, tok, kind):
    """`section` with the special tokens of tokenizer_config.json `tok` that
    differ from `kind`'s defaults."""
    for role, default in special_token_defaults(kind).items():
        token = tok.get(f"{role}_token")
        if isinstance(token, dict):  # transformers' AddedToken form
            token = token.get("content")
        if isinstance(token, str) and token != default:
            section[f"{role}_token"] = token
    return section


def tokenizer_kind_of(tokenizer):
    """The kind of `tokenizer`: its registered `kind`, else the one of its
    `vocabulary_file` (any object with the settings attributes of a bertzoo
    tokenizer)."""
    if getattr(tokenizer, "kind", None) in tokenizer_kinds():
        return tokenizer.kind
    for kind in tokenizer_kinds():
        if tokenizer_class(kind).vocabulary_file == tokenizer.vocabulary_file:
            return kind
    raise TokenizerError(
        f"No tokenizer kind uses the vocabulary file {tokenizer.vocabulary_file!r}."
    )


def hf_tokenizer_config(tokenizer, model_kind, model_class):
    """`tokenizer`'s settings as a `tokenizer_config.json` object, for a model
    type whose own tokenizer is `model_class` of kind `model_kind`: that class
    is named where the kinds agree, else the class of the vocabulary's kind
    (e.g. an ALBERT with a WordPiece vocabulary, as Korean ALBERTs ship)."""
    kind = tokenizer_kind_of(tokenizer)
    if kind == "fairseq_sentencepiece":
        config = {f"{role}_token": token for role, token in XLMR_SPECIALS.items()}
        config["add_prefix_space"] = True
        config["tokenizer_class"] = _HF_CLASS_OF_KIND[kind]
        return config
    config = {"do_lower_case": bool(tokenizer.lowercase)}
    if kind == "byte_level_bpe" and tokenizer.vocabulary_file == TOKENIZER_JSON_FILE:
        # As ModernBERT's: the tokenizer.json says the rest (transformers 5
        # loads it as it is).
        config = {"clean_up_tokenization_spaces": True}
    elif kind == "byte_level_bpe":
        config = {"add_prefix_space": bool(tokenizer.add_prefix_space)}
    elif kind == "sentencepiece":
        config["keep_accents"] = not tokenizer.strip_accents
    else:
        config["strip_accents"] = bool(tokenizer.strip_accents)
        config[REFERENCE_KEY] = getattr(tokenizer, "reference", "google")
    for role in SPECIAL_ROLES:
        token = getattr(tokenizer, f"{role}_token", None)
        if isinstance(token, str):
            config[f"{role}_token"] = token
    config["tokenizer_class"] = model_class if kind == model_kind else _HF_CLASS_OF_KIND[kind]
    return config


# A Hugging Face model type's usual tokenizer kind.
MODEL_TYPE_KINDS = {
    "bert": "wordpiece",
    "distilbert": "wordpiece",
    "albert": "sentencepiece",
    "electra": "wordpiece",
    "roberta": "byte_level_bpe",
    "xlm-roberta": "fairseq_sentencepiece",
    "modernbert": "byte_level_bpe",
}


def hf_preset_tokenizer(directory, reference=None):
    """`(tokenizer section, vocabulary_size)` of a Hugging Face checkpoint
    directory, from its `config.json` and `tokenizer_config.json`."""
    config_path = Path(directory) / "config.json"
    config = read_json_object(config_path, TokenizerError)
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPE_KINDS:
        raise TokenizerError(
            f"{config_path}: model_type {model_type!r} is not supported. Supported: "
            f"{', '.join(MODEL_TYPE_KINDS)}."
        )
    if "vocab_size" not in config:
        raise TokenizerError(f"{config_path}: missing the required key 'vocab_size'.")
    section = hf_tokenizer_section(directory, MODEL_TYPE_KINDS[model_type], reference)
    return section, config["vocab_size"]
