"""Synthetic text tasks for the outcome tests (fine-tuning, distillation):
small enough to learn in seconds from a random-init model, hard enough that
validation needs what training taught. Labels depend on several words, not
one; validation texts are longer than training's; training labels carry
noise."""

import numpy as np

POSITIVE, NEGATIVE = ("good", "great", "fine", "nice"), ("bad", "awful", "poor", "sad")
FILLER = ("the", "a", "day", "film", "was", "very", "and", "it", "my", "cat", "seemed", "today")


def sentence(rng, words, split):
    """`words` (kept in their order) among random filler words: 2-7 of them
    in training, 4-10 in validation, so validation texts are longer on
    average and some longer than any training text."""
    out = list(
        rng.choice(FILLER, int(rng.integers(2, 8) if split == "train" else rng.integers(4, 11)))
    )
    for word in words:
        out.insert(int(rng.integers(0, len(out) + 1)), word)
    return " ".join(out)


def majority_sentiment(seed, n, split):
    """(text, label) rows, labels "0"/"1" alternating: three sentiment words,
    two or three of the label's kind, so no single word decides the label.
    One training label in ten is flipped."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = i % 2
        agree = int(rng.integers(2, 4))
        words = list(rng.choice(POSITIVE if label else NEGATIVE, agree))
        words += list(rng.choice(NEGATIVE if label else POSITIVE, 3 - agree))
        rng.shuffle(words)
        text = sentence(rng, words, split)
        if split == "train" and rng.random() < 0.1:
            label = 1 - label
        rows.append((text, str(label)))
    return rows


def sentiment_balance(seed, n, split):
    """(text, score) rows: score = positive words minus negative words (each
    0 to 2), so the model must weigh both kinds; training scores carry
    Gaussian noise (standard deviation 0.3)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        p, q = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        words = list(rng.choice(POSITIVE, p)) + list(rng.choice(NEGATIVE, q))
        rng.shuffle(words)
        score = float(p - q)
        if split == "train":
            score = round(score + float(rng.normal(0, 0.3)), 3)
        rows.append((sentence(rng, words, split), score))
    return rows


def pair_majority(seed, n, split):
    """(first, second, label) rows for a sentence-pair task: each text holds
    one to three sentiment words of one kind among filler, and the label is
    the kind with more words over the two texts (pairs whose texts disagree
    with equal counts are not drawn). One text alone predicts the label at
    best 80% of the time (the Bayes rate of this distribution: 24 of its 30
    equally likely cases), so a higher accuracy needs both texts. Labels
    alternate; one training label in ten is flipped."""
    rng = np.random.default_rng(seed)
    rows = []
    while len(rows) < n:
        label = len(rows) % 2
        kinds = [int(k) for k in rng.integers(0, 2, 2)]
        counts = [int(c) for c in rng.integers(1, 4, 2)]
        if kinds[0] != kinds[1] and counts[0] == counts[1]:
            continue
        if (kinds[0] if kinds[0] == kinds[1] or counts[0] > counts[1] else kinds[1]) != label:
            continue
        texts = [
            sentence(rng, list(rng.choice(POSITIVE if kind else NEGATIVE, count)), split)
            for kind, count in zip(kinds, counts)
        ]
        if split == "train" and rng.random() < 0.1:
            label = 1 - label
        rows.append((*texts, str(label)))
    return rows


def scores_afresh(config, preset, model):
    """`model`'s validation scores on the files of the fine-tuning `config`,
    read and tokenized afresh with the tokenizer saved in `preset` and
    evaluated as the fine-tune recipe evaluates its epochs."""
    from bertzoo.tokenizers.base import from_preset
    from bertzoo.training.finetune import evaluate, load_split, resolve_defaults

    config = resolve_defaults(config)
    tokenizer = from_preset(preset)
    _, labels = load_split(config, config.train, tokenizer, config.sequence_length, True)
    data, _ = load_split(config, config.validation, tokenizer, config.sequence_length, True, labels)
    return evaluate(config, model, data, config.batch_size)
