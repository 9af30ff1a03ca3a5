"""Masked-LM selection in TensorFlow ops, batched and seedable.

One algorithm serves token, whole-word and ALBERT n-gram masking, and both
the static (TFRecord) and the dynamic (per-epoch, inside `tf.data`) paths:

1. Candidates: real tokens other than [CLS]/[SEP]/[PAD]. They are grouped
   into words: "token" masking makes every token a word; "whole_word" and
   "ngram" join WordPiece `##` pieces to their word (for SentencePiece a
   word starts at a piece beginning with "▁", "<" or an ASCII punctuation
   piece, as ALBERT does). Words never span a non-candidate ([SEP]).
2. num_to_predict = min(max_predictions_per_seq, max(1, round(len * rate)))
   with len counting [CLS]/[SEP] and Python's round-half-even (float64).
3. Words are visited in a random order. From each visited word an n-gram of
   n words is drawn (n=1 unless "ngram": n in 1..max_ngram with p ∝ 1/n,
   i.e. 6/11, 3/11, 2/11 for 3); n shrinks while the n-gram would exceed
   num_to_predict; it is skipped if it still does not fit or overlaps a
   selected word. This is the reference's greedy loop (BERT for n=1, ALBERT
   for n-grams).
4. Each selected token: 80% [MASK], 10% a random non-special token, 10%
   unchanged.

Randomness is `tf.random.stateless_*` from one int seed pair per batch.
"""

import logging

import numpy as np
import tensorflow as tf

logger = logging.getLogger("bertzoo.data")

KINDS = ("token", "whole_word", "ngram")
_ALBERT_PUNCT = set('!"#$%&"()*+,-./:;<=>?@[\\]^_`{|}~')


def word_start_table(tokenizer):
    """bool array over the vocabulary: does this piece start a word?"""
    from bertzoo.tokenizers.sentencepiece import SentencePieceTokenizer

    vocab = tokenizer.vocabulary
    if isinstance(tokenizer, SentencePieceTokenizer):
        starts = [t.startswith("▁") or t.startswith("<") or t in _ALBERT_PUNCT for t in vocab]
    else:
        starts = [not t.startswith("##") for t in vocab]
    return np.asarray(starts, bool)


class MaskedLMMasker:
    """Masks a batch of unmasked examples (TF ops; usable in `tf.data.map`).

    Args:
        tokenizer: the bertzoo tokenizer the ids come from.
        seq_len: example length S.
        max_predictions_per_seq: P, the fixed number of prediction slots.
        kind: "token", "whole_word" or "ngram" (ALBERT).
        mask_rate: fraction of tokens to predict (0.15).
        max_ngram: largest n for "ngram" (3).

    `masker(token_ids, padding_mask, seed)` with int32 (B, S) tensors and a
    (2,) integer seed returns (masked_token_ids (B, S), mask_positions
    (B, P), mask_ids (B, P), mask_weights float32 (B, P)).
    """

    def __init__(
        self, tokenizer, seq_len, max_predictions_per_seq, kind="token", mask_rate=0.15, max_ngram=3
    ):
        if kind not in KINDS:
            raise ValueError(f"masking kind must be one of {KINDS}, got {kind!r}.")
        if max_predictions_per_seq < 1:
            raise ValueError(
                f"max_predictions_per_seq must be >= 1, got {max_predictions_per_seq}."
            )
        if max_predictions_per_seq > seq_len:
            raise ValueError(
                f"max_predictions_per_seq={max_predictions_per_seq} exceeds seq_len={seq_len}."
            )
        if not 0.0 < mask_rate < 1.0:
            raise ValueError(f"mask_rate must be in (0, 1), got {mask_rate}.")
        wanted = int(round(seq_len * mask_rate))
        if max_predictions_per_seq < wanted:
            logger.warning(
                "max_predictions_per_seq=%d is smaller than round(seq_len * mask_rate) = %d "
                "(seq_len=%d, mask_rate=%g): full-length examples get fewer than %g%% masked tokens.",
                max_predictions_per_seq,
                wanted,
                seq_len,
                mask_rate,
                mask_rate * 100,
            )
        self.seq_len = int(seq_len)
        self.max_predictions_per_seq = int(max_predictions_per_seq)
        self.kind = kind
        self.mask_rate = float(mask_rate)
        self.max_ngram = int(max_ngram) if kind == "ngram" else 1
        self.vocabulary_size = tokenizer.vocabulary_size
        self.cls_id, self.sep_id, self.pad_id = (
            tokenizer.cls_token_id,
            tokenizer.sep_token_id,
            tokenizer.pad_token_id,
        )
        self.mask_id = tokenizer.mask_token_id
        special = set(tokenizer.special_token_ids)
        self._random_ids = tf.constant(
            [i for i in range(tokenizer.vocabulary_size) if i not in special], tf.int32
        )
        starts = (
            word_start_table(tokenizer)
            if kind != "token"
            else np.ones(tokenizer.vocabulary_size, bool)
        )
        self._word_start = tf.constant(starts)
        p = 1.0 / np.arange(1, self.max_ngram + 1)
        self._ngram_cdf = tf.constant(np.cumsum(p / p.sum())[:-1], tf.float32)
        self._compiled = tf.function(self._mask, reduce_retracing=True, autograph=False)

    def config(self):
        return {
            "kind": self.kind,
            "mask_rate": self.mask_rate,
            "max_ngram": self.max_ngram,
            "max_predictions_per_seq": self.max_predictions_per_seq,
        }

    def num_to_predict(self, lengths):
        rate = tf.cast(lengths, tf.float64) * self.mask_rate
        n = tf.cast(tf.round(rate), tf.int32)  # round half to even, like Python
        return tf.minimum(self.max_predictions_per_seq, tf.maximum(1, n))

    def __call__(self, token_ids, padding_mask, seed):
        return self._compiled(
            tf.convert_to_tensor(token_ids, tf.int32),
            tf.convert_to_tensor(padding_mask),
            tf.convert_to_tensor(seed),
        )

    def _mask(self, token_ids, padding_mask, seed):
        padding_mask = tf.cast(padding_mask, tf.bool)
        seed = tf.cast(seed, tf.int64)
        S, P, N = self.seq_len, self.max_predictions_per_seq, self.max_ngram
        B = tf.shape(token_ids)[0]
        seeds = tf.random.experimental.stateless_split(seed, 5)

        cand = (
            padding_mask
            & (token_ids != self.cls_id)
            & (token_ids != self.sep_id)
            & (token_ids != self.pad_id)
        )
        prev_cand = tf.pad(cand[:, :-1], [[0, 0], [1, 0]])
        starts = cand & (tf.gather(self._word_start, token_ids) | ~prev_cand)
        word_of = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # (B, S)
        num_words = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)  # (B,)
        # Token length of each word (B, S); words are indexed 0..num_words-1.
        seg = tf.where(cand, word_of + S * tf.range(B)[:, None], B * S)
        word_len = tf.math.unsorted_segment_sum(
            tf.ones([B * S], tf.int32), tf.reshape(seg, [-1]), B * S + 1
        )
        word_len = tf.reshape(word_len[:-1], [B, S])
        cum = tf.pad(tf.cumsum(word_len, axis=1), [[0, 0], [1, 0]])  # (B, S+1), exclusive
        budget = self.num_to_predict(tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=1))

        # Random visiting order of the words; invalid slots sort last.
        w_range = tf.range(S)[None, :]
        priority = tf.random.stateless_uniform([B, S], seeds[0])
        priority = tf.where(w_range < num_words[:, None], priority, 2.0)
        order = tf.argsort(priority, axis=1, stable=True)  # (B, S)
        u = tf.random.stateless_uniform([B, S], seeds[1])
        n_draw = 1 + tf.reduce_sum(
            tf.cast(u[:, :, None] >= self._ngram_cdf, tf.int32), axis=2
        )  # (B, S)
        # ngram_len[b, w, n-1]: tokens in the (clamped) n-gram starting at word w.
        ends = tf.minimum(
            w_range[:, :, None] + tf.range(1, N + 1), num_words[:, None, None]
        )  # (B, S, N)
        ngram_len = tf.gather(cum, ends, batch_dims=1) - cum[:, :S, None]

        def body(k, count, covered):
            w = order[:, k]  # (B,)
            n0 = tf.gather(n_draw, w, batch_dims=1)
            lens = tf.gather(ngram_len, w, batch_dims=1)  # (B, N)
            fits = (count[:, None] + lens <= budget[:, None]) & (
                tf.range(1, N + 1)[None, :] <= n0[:, None]
            )
            n = tf.reduce_sum(tf.cast(fits, tf.int32), axis=1)  # largest fitting n <= n0 (0: none)
            words = w[:, None] + tf.range(N)[None, :]  # (B, N)
            inside = (tf.range(N)[None, :] < n[:, None]) & (words < num_words[:, None])
            hit = tf.gather(covered, tf.minimum(words, S - 1), batch_dims=1) & inside
            take = (k < num_words) & (n > 0) & ~tf.reduce_any(hit, axis=1)
            mark = inside & take[:, None]
            covered = covered | tf.reduce_any((tf.one_hot(words, S) > 0) & mark[:, :, None], axis=1)
            count = count + tf.where(take, tf.gather(lens, tf.maximum(n - 1, 0), batch_dims=1), 0)
            return k + 1, count, covered

        def cond(k, count, covered):
            return (k < tf.reduce_max(num_words)) & tf.reduce_any(count < budget)

        _, _, covered = tf.while_loop(
            cond,
            body,
            [tf.constant(0), tf.zeros([B], tf.int32), tf.zeros([B, S], tf.bool)],
            maximum_iterations=S,
        )
        selected = cand & tf.gather(covered, tf.maximum(word_of, 0), batch_dims=1)

        # 80% [MASK], 10% random token, 10% unchanged.
        r = tf.random.stateless_uniform([B, S], seeds[2])
        random_ids = tf.gather(
            self._random_ids,
            tf.random.stateless_uniform(
                [B, S], seeds[3], maxval=tf.shape(self._random_ids)[0], dtype=tf.int32
            ),
        )
        replaced = tf.where(r < 0.8, self.mask_id, tf.where(r < 0.9, random_ids, token_ids))
        masked = tf.where(selected, replaced, token_ids)

        # Selected positions first, ascending; then padding slots.
        pos = tf.range(S)[None, :]
        key = tf.where(selected, pos, S + pos)
        positions = tf.sort(key, axis=1)[:, :P]
        weights = positions < S
        positions = tf.where(weights, positions, 0)
        mask_ids = tf.where(weights, tf.gather(token_ids, positions, batch_dims=1), 0)
        return masked, positions, mask_ids, tf.cast(weights, tf.float32)
