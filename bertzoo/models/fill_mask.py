"""Fill-mask: what a masked-LM head predicts at each `[MASK]` of a text.

    bertzoo.fill_mask("runs/pretrain/preset", "the [MASK] sat on the mat.")
    python -m bertzoo fill-mask PRESET "서울은 대한민국의 [MASK]이다." --top-k 5

The text is split at the tokenizer's mask token and each piece is tokenized
on its own, so a `[MASK]` is one token whatever the tokenizer's handling of
bracketed text (a piece after a mask starts a new word, as in the Hugging
Face tokenizers, which split added tokens out first). RoBERTa's and XLM-R's
`<mask>` also takes the whitespace before it, as their tokenizers'
`lstrip` does (`Tokenizer.mask_absorbs`): "the <mask>" reads "the" +
<mask>, and the model predicts the space with the token ("Ġcat"). Each
candidate says how it reads (`text`, " cat", `Tokenizer.token_text`) and
the text with it in the mask's place (`sequence`). Probabilities are the
softmax of the head's logits over the whole vocabulary at that position.
"""

import logging
from pathlib import Path

import numpy as np
from keras import ops

from bertzoo import presets as preset_lib
from bertzoo.loader_registry import preset_loader
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.electra import ElectraPretrainer
from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.tokenizers import from_preset as tokenizer_from_preset
from bertzoo.tokenizers.base import text_cap

logger = logging.getLogger(__name__)


class NoMaskedLMHead(preset_lib.PresetError):
    """The model has no trained masked-LM head to fill masks with."""


def _mlm_head_loaded(pretrainer):
    # The masked-LM head tensors of every family (BERT, ALBERT, DistilBERT,
    # ELECTRA generators).
    return bool(preset_loader().mlm_head_names().intersection(pretrainer.head_weights_loaded))


def masked_lm_model(preset):
    """`(model, tokenizer)` for a preset with a masked-LM head: a
    `BertPretrainer` whose head came from the checkpoint, or, for an ELECTRA
    preset whose discriminator has none, its `generator/`."""
    # Model and tokenizer from one published version of the directory, even
    # while a run publishes the next one there (what it is, too: classifying
    # a directory reads its files).
    with preset_lib.pinned(preset) as source:
        kind, _ = preset_lib.classify(source)
        if kind == "builtin":
            raise NoMaskedLMHead(
                f"{preset!r} is a built-in architecture without weights: fill-mask needs a "
                "trained masked-LM head (a pre-training recipe output, a converted checkpoint "
                "or a Hugging Face *ForMaskedLM / *ForPreTraining directory)."
            )
        names = _head_tensor_names(kind, Path(source))
        if (
            names is not None
            and not _has_mlm_head(names)
            and not (Path(source) / preset_lib.GENERATOR_DIR / preset_lib.CONFIG_FILE).is_file()
        ):
            # Refused from the files' own tensor names, before a model is
            # built (a MiniLM took 7.7 s to be refused).
            raise _no_head(preset, sorted(n for n in names if not _is_encoder_tensor(n)))
        return _masked_lm_model(preset, source)


# Where a checkpoint keeps its tensor names without loading any: a bertzoo
# preset's task and pre-training heads, a Hugging Face directory's weights.
_HF_WEIGHTS = "model.safetensors"
_ENCODER_PARTS = ("embeddings.", "encoder.", "layer.", "layers.", "pooler.", "transformer.")


def _head_tensor_names(kind, directory):
    """The head tensors' names a directory holds, read from file headers
    only; None where that cannot be told without loading (other weight
    formats), so the model is built and asked."""
    from bertzoo.io.safetensors import tensor_names

    if kind == "bertzoo":
        heads = directory / preset_lib.HEADS_FILE
        return set(tensor_names(heads)) if heads.is_file() else set()
    if kind == "hf" and (directory / _HF_WEIGHTS).is_file():
        return set(tensor_names(directory / _HF_WEIGHTS))
    return None


def _is_encoder_tensor(name):
    parts = name.split(".")
    return any(f"{p}." in _ENCODER_PARTS for p in parts[:2])


def _has_mlm_head(names):
    """Whether `names` hold a masked-LM head tensor of any family, compared
    by module (a checkpoint may name a LayerNorm's weight `gamma`)."""
    modules = {m.rsplit(".", 1)[0] for m in preset_loader().mlm_head_names()}
    return any(n.rsplit(".", 1)[0] in modules or n in modules for n in names)


def _no_head(preset, heads):
    return NoMaskedLMHead(
        f"{preset} has no masked-LM head (its checkpoint holds "
        f"{', '.join(heads) or 'no heads'}): fill-mask needs one. "
        "Use a pre-training recipe output, a Hugging Face *ForMaskedLM / *ForPreTraining "
        "directory, a converted Google checkpoint or an ELECTRA generator."
    )


def _masked_lm_model(preset, source):
    """`masked_lm_model` of `preset` (the name messages show), read from
    `source` (its pinned view)."""
    backbone = BertBackbone.from_preset(source)
    pretrainer = BertPretrainer(backbone, objective="none")
    if not _mlm_head_loaded(pretrainer):
        generator = Path(source) / preset_lib.GENERATOR_DIR
        if (generator / preset_lib.CONFIG_FILE).is_file():
            shown = Path(preset) / preset_lib.GENERATOR_DIR
            logger.info("%s has no masked-LM head; using its ELECTRA generator %s.", preset, shown)
            return _masked_lm_model(shown, generator)
        raise _no_head(preset, sorted(backbone.head_tensors))
    return pretrainer, tokenizer_from_preset(source)


def mask_spans(tokenizer, text):
    """The `(start, end)` of each mask token in `text`, left to right, the
    start moved back over the characters it absorbs before it
    (`Tokenizer.mask_absorbs`, not past the mask before)."""
    mask, spans, at = tokenizer.mask_token, [], 0
    while (found := text.find(mask, at)) >= 0:
        # str.rstrip("") strips nothing: BERT's [MASK] absorbs no space.
        start = at + len(text[at:found].rstrip(tokenizer.mask_absorbs))
        spans.append((start, found + len(mask)))
        at = found + len(mask)
    return spans


def filled(tokenizer, text, span, token_id, max_chars):
    """`text` with the mask at `span` (`mask_spans`) replaced by the text of
    `token_id`, its space included; a space the tokenizer puts before every
    text (`adds_prefix_space`) is no part of the text at its start. None for
    a text over `max_chars` characters (a copy per candidate would cost
    its length times top_k)."""
    if len(text) > max_chars:
        return None
    start, end = span
    token = tokenizer.token_text(token_id)
    if start == 0 and tokenizer.adds_prefix_space:
        token = token.removeprefix(" ")
    return text[:start] + token + text[end:]


def _encode(tokenizer, text, max_length):
    """Token ids `[CLS] ... [SEP]` with the mask token's id at each mask, the
    mask positions and the masks' spans in the text (`mask_spans`)."""
    return _encode_all(tokenizer, [text], max_length)[0]


# Pieces per tokenizer call in `_encode_all`: one call per text cost a
# TensorFlow dispatch (about 17 ms) per text; a batch bounds the memory.
_PIECES_PER_CALL = 4096


def _encode_all(tokenizer, texts, max_length):
    """`_encode` of each of `texts`, the pieces around their masks
    tokenized in a few batched calls (each piece alone, as one text's
    pieces would be)."""
    cap = text_cap(max_length)
    split = []
    for text in texts:
        spans = mask_spans(tokenizer, text)
        if not spans:
            raise ValueError(
                f"{text!r} has no {tokenizer.mask_token}: fill-mask predicts the token at each "
                f"{tokenizer.mask_token} of a text."
            )
        bounds = [0, *(i for span in spans for i in span), len(text)]
        split.append((text, spans, [text[a:b] for a, b in zip(bounds[::2], bounds[1::2])]))
    # A piece longer than 64 characters per token the model reads cannot
    # fit: tokenizing its cut (not all of a 10 MB text) tells so.
    flat = [piece[:cap] for _, _, pieces in split for piece in pieces]
    rows = []
    for start in range(0, len(flat), _PIECES_PER_CALL):
        chunk = _as_tensor(flat[start : start + _PIECES_PER_CALL])
        rows += tokenizer.tokenize_ids(chunk).to_list()
    encoded, at = [], 0
    for text, spans, pieces in split:
        own, at = rows[at : at + len(pieces)], at + len(pieces)
        cut = any(len(p) > cap for p in pieces)
        if cut and sum(map(len, own)) + len(own) + 1 <= max_length:  # spread-out text: all of it
            own = tokenizer.tokenize_ids(_as_tensor(pieces)).to_list()
        encoded.append(_with_masks(tokenizer, text, own, spans, cut, max_length))
    return encoded


def _with_masks(tokenizer, text, rows, spans, cut, max_length):
    """`_encode`'s result from the token ids of the pieces between masks."""
    ids, positions = [tokenizer.cls_token_id], []
    for i, row in enumerate(rows):
        if i:
            positions.append(len(ids))
            ids.append(tokenizer.mask_token_id)
        ids.extend(int(t) for t in row)
    ids.append(tokenizer.sep_token_id)
    if len(ids) > max_length:
        raise ValueError(
            f"{text[:60]!r}... is {'at least ' if cut else ''}{len(ids)} tokens with [CLS] and [SEP]; "
            "the model reads at most "
            f"{max_length}. Shorten it around the mask."
        )
    return ids, positions, spans


def _as_tensor(strings):
    import tensorflow as tf  # tokenizers run TensorFlow ops under every backend

    return tf.constant(strings, tf.string)


def _logits(model, batch):
    if isinstance(model, ElectraPretrainer):  # the generator, on the shared embeddings
        return model.generator_logits(batch, training=False)
    return model(batch, training=False)["mlm"]


def fill_mask(model, texts, top_k=5, tokenizer=None, batch_size=32):
    """The `top_k` most probable tokens at every mask token of `texts`.

    Args:
        model: a preset with a masked-LM head (the pre-training recipe's
            `preset/`, a Hugging Face `*ForMaskedLM`/`*ForPreTraining`
            directory, a converted Google checkpoint, an ELECTRA generator
            or an ELECTRA preset with its `generator/`), or a
            `BertPretrainer` / `ElectraPretrainer` (then pass `tokenizer`).
        texts: a string or a list of strings, each with one or more mask
            tokens (`[MASK]` for BERT vocabularies).
        top_k: how many tokens per mask.
        tokenizer: the model's tokenizer (default: the preset's).
        batch_size: texts per forward pass.

    Returns, per text (a string gives one list, not a list of one), one list
    per mask in text order of `top_k` dicts `{"token_id", "token", "text",
    "sequence", "score"}`, most probable first: the vocabulary's token
    ("Ġcat"), how it reads with its space (" cat"; `Tokenizer.token_text`),
    the text with it in this mask's place (the whitespace a RoBERTa or XLM-R
    `<mask>` absorbs replaced too; other masks left as they are; None for
    a text over `text_cap` characters of the model's length), and its
    probability.

    Example:
    >>> fill_mask("runs/pretrain/preset", "the [MASK] sat on the mat.", top_k=3)
    [[{'token_id': 2134, 'token': 'cat', 'text': 'cat', 'sequence': 'the cat sat on the mat.', 'score': 0.41}, ...]]
    """
    if isinstance(model, (str, Path)):
        model, preset_tokenizer = masked_lm_model(model)
        tokenizer = tokenizer or preset_tokenizer
    elif not isinstance(model, (BertPretrainer, ElectraPretrainer)):
        raise TypeError(
            "model must be a preset (name or directory), a BertPretrainer or an "
            f"ElectraPretrainer, got {type(model).__name__}."
        )
    if tokenizer is None:
        raise ValueError("Pass tokenizer= with a model object (a preset brings its own).")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}.")
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    backbone = model.discriminator if isinstance(model, ElectraPretrainer) else model.backbone
    top_k = min(top_k, backbone.vocabulary_size)
    encoded = _encode_all(tokenizer, texts, backbone.max_sequence_length)
    cap = text_cap(backbone.max_sequence_length)
    results = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start : start + batch_size]
        length = max(len(ids) for ids, _, _ in chunk)
        slots = max(len(positions) for _, positions, _ in chunk)
        token_ids = np.zeros((len(chunk), length), "int32")
        mask_positions = np.zeros((len(chunk), slots), "int32")
        for row, (ids, positions, _) in enumerate(chunk):
            token_ids[row, : len(ids)] = ids
            mask_positions[row, : len(positions)] = positions
        batch = {
            "token_ids": token_ids,
            "segment_ids": np.zeros_like(token_ids),
            "padding_mask": (np.arange(length)[None, :] < [[len(i)] for i, _, _ in chunk]).astype(
                "int32"
            ),
            "mask_positions": mask_positions,
        }
        logits = np.asarray(ops.convert_to_numpy(_logits(model, batch)), "float64")
        logits -= logits.max(-1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(-1, keepdims=True)
        for row, (_, positions, spans) in enumerate(chunk):
            text = texts[start + row]
            per_mask = []
            for slot in range(len(positions)):
                p = probabilities[row, slot]
                best = np.argsort(-p, kind="stable")[:top_k]
                per_mask.append(
                    [
                        {
                            "token_id": int(i),
                            "token": tokenizer.id_to_token(int(i)),
                            "text": tokenizer.token_text(int(i)),
                            "sequence": filled(tokenizer, text, spans[slot], int(i), cap),
                            "score": float(p[i]),
                        }
                        for i in best
                    ]
                )
            results.append(per_mask)
    return results[0] if single else results
