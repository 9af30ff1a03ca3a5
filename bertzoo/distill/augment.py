"""TinyBERT-style data augmentation for task distillation: words swapped for
their nearest neighbours in the teacher's token-embedding table.

    words = {w for t in texts for w in WORD.findall(t.lower())}
    neighbours = neighbour_table(tokenizer, token_embeddings, words)
    variants, dropped = augment_texts(texts, neighbours, copies=20, exclude=validation_texts)
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


def augment_texts(texts, neighbours, copies, exclude=(), seed=0, replace_probability=0.4):
    """`copies` variants of every text, each word swapped with probability
    `replace_probability` for one of its neighbours. Variants equal to a text
    in `exclude` (after lowercasing and word splitting) are dropped, so held-out
    texts never enter training. Returns (variants, number dropped)."""
    rng = random.Random(seed)
    norm = lambda t: " ".join(WORD.findall(t.lower()))  # noqa: E731
    held_out = {norm(t) for t in exclude}
    seen = {norm(t) for t in texts}  # the originals, and then every kept variant
    out, dropped = [], 0
    for text in texts:
        words = WORD.findall(text.lower())
        for _ in range(copies):
            new = [
                rng.choice(neighbours[w])
                if w in neighbours and rng.random() < replace_probability
                else w
                for w in words
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
