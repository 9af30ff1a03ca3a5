"""TinyBERT-style data augmentation for task distillation: words swapped for
what a masked-LM head proposes in their place, or for their nearest
neighbours in the teacher's token-embedding table.

    words = {w for t in texts for w in WORD.findall(t.lower())}
    neighbours = neighbour_table(tokenizer, token_embeddings, words)
    variants, dropped = augment_texts(texts, neighbours, copies=20, exclude=validation_texts)
    # or, with a masked-LM head (TinyBERT's own method):
    candidates = mlm_candidates(pretrainer, tokenizer, texts)
    variants, dropped = augment_texts(texts, candidates, copies=20, exclude=validation_texts)
"""

import random
import re

import numpy as np

WORD = re.compile(r"\w+|[^\w\s]")  # the words (and punctuation marks) that augmentation swaps


def neighbour_table(tokenizer, token_embeddings, words, k=30):
    """For each word that is one vocabulary entry: its `k` nearest whole-word
    entries by cosine in the teacher's token-embedding table (TinyBERT's
    GloVe-neighbour augmentation, with the teacher's own embeddings)."""
    vocab = list(tokenizer.vocabulary)
    index = {w: i for i, w in enumerate(vocab)}
    candidates = np.array(
        [i for i, w in enumerate(vocab) if w.isalpha() and w.islower() and len(w) > 1]
    )
    table = np.asarray(token_embeddings, "float32")
    normed = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
    cand = normed[candidates]
    out = {}
    for word in sorted(set(words)):
        i = index.get(word)
        if i is None or not word.isalpha():
            continue
        scores = cand @ normed[i]
        best = candidates[np.argsort(-scores)[: k + 1]]
        out[word] = [vocab[j] for j in best if j != i][:k]
    return out


def mlm_candidates(model, tokenizer, texts, k=15, batch_size=64):
    """TinyBERT's masked-LM proposals: for every word of every text (as
    `WORD` splits the lowercased text) that is one alphabetic vocabulary
    entry, the `k` whole words a masked-LM head (`model`, a `BertPretrainer`
    with a trained head) ranks highest with that word masked, the word
    itself left out; None for other words. Returns one list per text,
    aligned with its words, for `augment_texts`."""
    from bertzoo.models.fill_mask import fill_mask

    vocabulary = set(tokenizer.vocabulary)
    out, masked, where = [], [], []
    for t, text in enumerate(texts):
        words = WORD.findall(text.lower())
        out.append([None] * len(words))
        for i, word in enumerate(words):
            if word.isalpha() and word in vocabulary:
                masked.append(" ".join(words[:i] + [tokenizer.mask_token] + words[i + 1 :]))
                where.append((t, i))

    def fill(chunk):
        try:
            return fill_mask(model, chunk, top_k=k + 1, tokenizer=tokenizer, batch_size=batch_size)
        except ValueError:  # a text too long for the model: those alone go without
            if len(chunk) == 1:
                return [None]
            return [r for text in chunk for r in fill([text])]

    for start in range(0, len(masked), batch_size):
        results = fill(masked[start : start + batch_size])
        for (t, i), per_mask in zip(where[start : start + batch_size], results):
            if per_mask is None:
                continue
            word = WORD.findall(texts[t].lower())[i]
            found = [c["token"] for c in per_mask[0] if c["token"].isalpha() and c["token"] != word]
            out[t][i] = found[:k] or None
    return out


def augment_texts(texts, neighbours, copies, exclude=(), seed=0, replace_probability=0.4):
    """`copies` variants of every text, each word swapped with probability
    `replace_probability` for one of its candidates: `neighbours` maps a
    word to its candidates (`neighbour_table`), or holds per text one
    candidate list (or None) per word (`mlm_candidates`). Variants equal to
    a text in `exclude` (after lowercasing and word splitting) are dropped,
    so held-out texts never enter training. Returns (variants, number
    dropped)."""
    rng = random.Random(seed)
    norm = lambda t: " ".join(WORD.findall(t.lower()))  # noqa: E731
    held_out = {norm(t) for t in exclude}
    seen = {norm(t) for t in texts}  # the originals, and then every kept variant
    out, dropped = [], 0
    for index, text in enumerate(texts):
        words = WORD.findall(text.lower())
        if isinstance(neighbours, dict):
            options = [neighbours.get(w) for w in words]
        else:
            options = neighbours[index]
        for _ in range(copies):
            new = [
                rng.choice(o) if o and rng.random() < replace_probability else w
                for w, o in zip(words, options)
            ]
            joined = " ".join(new)
            if joined in held_out:
                dropped += 1
                continue
            if joined in seen:
                continue
            seen.add(joined)
            out.append(joined)
    return out, dropped
