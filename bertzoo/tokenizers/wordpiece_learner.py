"""tensorflow-text's WordPiece learner (`wordpiece_tokenizer_learner_lib`,
the one `train.train_wordpiece` calls), generalised to words counted in
units that may continue a word: the units of morpheme-aware training
(`bertzoo.tokenizers.morphemes`), where 저는 is counted as 저 and a
continuation 는.

A unit that starts a word is learnt from exactly as tensorflow-text learns
from a word: its pieces that start at its first character are word starts,
the others "##" continuations. A continuation unit (counted with the
`morphemes.CONTINUATION` prefix) gives "##" pieces only. No piece spans two
units. Everything else is tensorflow-text's algorithm, step for step (the
frequency threshold's binary search, the iterations that count substrings
from the previous vocabulary's split points, the prefix-count decrement,
the alphabet limit), and its helpers are called where they apply as they
are: on counts whose units all start words, `learn` gives tensorflow-text's
vocabulary exactly (tests/tokenizers/test_train_morphemes.py checks this),
so a morpheme-aware vocabulary differs from a plain one only by what it was
counted on.
"""

import collections

from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as tft

from bertzoo.tokenizers.morphemes import CONTINUATION


def _units(unit_counts):
    """(text, starts a word, count) triples."""
    out = []
    for unit, count in unit_counts:
        if unit.startswith(CONTINUATION):
            out.append((unit[len(CONTINUATION) :], False, count))
        else:
            out.append((unit, True, count))
    return out


def _split_indices(text, first, tokens, joiner):
    """tensorflow-text's `get_split_indices` for a unit: the ends of its
    greedy longest-match pieces under `tokens`, or None."""
    indices = []
    start = 0
    while start < len(text):
        end = len(text)
        while end > start:
            piece = text[start:end]
            if start > 0 or not first:
                piece = joiner + piece
            if piece in tokens:
                indices.append(end)
                break
            end -= 1
        if end == start:
            return None
        start = end
    return indices


def _learn_with_thresh(units, thresh, params):
    """tensorflow-text's `learn_with_thresh` over units."""
    joiner = params.joiner
    char_tokens = {c for text, _, _ in units for c in text}
    tokens = tft.ensure_all_tokens_exist(char_tokens, {}, True, joiner)
    for iteration in range(params.num_iterations):
        subtokens = [dict() for _ in range(params.max_token_length + 1)]
        for text, first, count in units:
            if iteration == 0:
                split_indices = range(1, len(text) + 1)
            else:
                split_indices = _split_indices(text, first, tokens, joiner)
                if not split_indices:
                    continue
            start = 0
            for index in split_indices:
                for end in range(start + 1, len(text) + 1):
                    piece = text[start:end]
                    length = len(piece)
                    if start > 0 or not first:
                        piece = joiner + piece
                    table = subtokens[length]
                    table[piece] = table.get(piece, 0) + count
                start = index
        next_tokens = {}
        for length in range(params.max_token_length, 0, -1):
            for token, count in subtokens[length].items():
                if count >= thresh:
                    next_tokens[token] = count
                if len(token) > length:  # a "##" piece
                    for i in range(1 + len(joiner), length + len(joiner)):
                        prefix = token[0:i]
                        if prefix in subtokens[i - len(joiner)]:
                            subtokens[i - len(joiner)][prefix] -= count
                else:
                    for i in range(1, length):
                        prefix = token[0:i]
                        if prefix in subtokens[i]:
                            subtokens[i][prefix] -= count
        tokens = tft.ensure_all_tokens_exist(char_tokens, next_tokens, True, joiner)
    return tft.generate_final_vocabulary(params.reserved_tokens, char_tokens, tokens)


def _binary_search(units, lower, upper, params):
    """tensorflow-text's `learn_binary_search` (as a loop)."""
    while True:
        thresh = (upper + lower) // 2
        vocabulary = _learn_with_thresh(units, thresh, params)
        slack = max(params.slack_ratio * params.vocab_size, 0)
        within = len(vocabulary) <= params.vocab_size and (
            params.vocab_size - len(vocabulary) <= slack
        )
        if within or lower >= upper or thresh <= 1:
            return vocabulary
        if len(vocabulary) > params.vocab_size:
            lower = thresh + 1
        else:
            upper = thresh - 1


def learn(
    unit_counts,
    vocab_size,
    reserved_tokens,
    upper_thresh=int(1e7),
    lower_thresh=10,
    num_iterations=4,
    max_input_tokens=int(5e6),
    max_token_length=50,
    max_unique_chars=1000,
    slack_ratio=0.05,
    include_joiner_token=True,
    joiner="##",
):
    """tensorflow-text's `learn` (same arguments) over unit counts: (unit,
    count) pairs, a continuation unit prefixed with
    `morphemes.CONTINUATION`. Returns the vocabulary (a list).
    `include_joiner_token` must be True (continuations need "##")."""
    if not include_joiner_token:
        raise ValueError("Learning over units needs include_joiner_token=True.")
    if isinstance(unit_counts, dict):
        unit_counts = unit_counts.items()
    units = _units(unit_counts)
    params = tft.Params(
        upper_thresh,
        lower_thresh,
        num_iterations,
        max_input_tokens,
        max_token_length,
        max_unique_chars,
        vocab_size,
        slack_ratio,
        True,
        joiner,
        reserved_tokens,
    )
    upper, lower = tft.get_search_threshs(
        [(text, count) for text, _, count in units], upper_thresh, lower_thresh
    )
    # get_input_words, get_allowed_chars and filter_input_words over units.
    kept = [
        u for u in units if len(u[0]) <= max_token_length and not (u[1] and u[0] in reserved_tokens)
    ]
    char_counts = collections.defaultdict(int)
    for text, _, count in kept:
        for char in text:
            char_counts[char] += count
    ranked = sorted(
        sorted(char_counts.items(), key=lambda x: x[0]), key=lambda x: x[1], reverse=True
    )
    allowed = {char for char, _ in ranked[:max_unique_chars]}
    kept = sorted(kept, key=lambda u: u[2], reverse=True)
    filtered = []
    for unit in kept:
        if max_input_tokens not in (None, -1) and len(filtered) >= max_input_tokens:
            break
        if allowed.issuperset(unit[0]):
            filtered.append(unit)
    return _binary_search(filtered, lower, upper, params)
