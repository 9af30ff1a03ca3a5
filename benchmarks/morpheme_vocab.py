"""Morpheme-aware against plain vocabularies on Korean text (KLUE's recipe,
`--pre-tokenize morphemes`), for WordPiece and byte-level BPE: how the
vocabulary fits held-out text, and the masked-LM accuracy a small model
reaches after the same number of pre-training steps.

The Korean text there is, offline: tests/fixtures/korean_documents.txt
(news, daily life, reviews, science: 345 sentences) and korean_corpus.txt
(292 everyday sentences), and the Korean translations of the system's
message catalogues (/usr/share/locale/ko/LC_MESSAGES/*.mo, as
benchmarks/vocab_sampling.py reads them: software messages with English
terms, numbers and format strings; absent on a machine without them).
bertzoo's built-in corpora are English. The lines are shuffled with seed 0;
every 10th is held out.

`fit`: per kind and pre-tokenization, the vocabulary trained on the
training lines (`--vocab-size`, cased, no accent stripping), then on the
held-out lines: `unk_rate` (the share of tokens that are [UNK]; a
byte-level BPE has none by construction), `tokens_per_word` (tokens per
whitespace-separated word, eojeol; punctuation counts), and the training
seconds.

`mlm`: pre-training runs (`bertzoo.training.pretrain`, the recipe's
library call) on the training lines, one document per line, masked LM only
(no sentence objective), `--steps` steps of batch 32 at sequence length
64, learning rate 2e-3, one run per seed and vocabulary: bert_tiny with the
two WordPiece vocabularies, a RoBERTa-shaped model of bert_tiny's size
with the two byte-level BPEs. Each run holds out 5% of the documents (the
same ones for every vocabulary at a seed; the evaluation takes 8 batches
of sequences from the first of them) and reports the masked-LM accuracy
and loss there after training. The two vocabularies do not ask
the same questions (a morpheme-aware one masks shorter pieces, more of
them per word), so the accuracies compare what a model of this size
learns in as many steps, not the same task.

    python benchmarks/morpheme_vocab.py            # ~30 minutes on 2 cores
    python benchmarks/morpheme_vocab.py --steps 50 --seeds 0   # a quick look
"""

import argparse
import json
import logging
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, cpu_info, versions  # noqa: E402
from vocab_sampling import korean_messages  # noqa: E402

from bertzoo.tokenizers import BertTokenizer, ByteLevelBPETokenizer, train, train_bpe  # noqa: E402
from bertzoo.training.pretrain import PretrainConfig, run_pretraining  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
CASED = dict(lowercase=False, strip_accents=False)
HOW = ("words", "morphemes")


def corpus_lines():
    fixtures = []
    for name in ("korean_documents.txt", "korean_corpus.txt"):
        text = (FIXTURES / name).read_text(encoding="utf-8")
        fixtures += [line for line in text.splitlines() if line.strip()]
    messages = korean_messages()
    lines = fixtures + messages
    random.Random(0).shuffle(lines)
    return lines, {"fixture_lines": len(fixtures), "message_catalogue_lines": len(messages)}


def fit(tokenizer, lines):
    ids = tokenizer.tokenize_ids(tf.constant(lines)).flat_values.numpy()
    words = sum(len(line.split()) for line in lines)
    unk = int((ids == tokenizer.unk_token_id).sum())
    return {
        "tokens_per_word": round(len(ids) / words, 4),
        "unk_rate": round(unk / len(ids), 5),
    }


def train_vocabularies(corpus, directory, vocab_size):
    """{kind: {how: (path, seconds)}}"""
    out = {"wordpiece": {}, "byte_level_bpe": {}}
    for how in HOW:
        start = time.perf_counter()
        path = directory / f"wordpiece_{how}" / "vocab.txt"
        path.parent.mkdir(parents=True)
        train.train_wordpiece([str(corpus)], vocab_size, output=path, pre_tokenize=how, **CASED)
        out["wordpiece"][how] = (path, time.perf_counter() - start)
        start = time.perf_counter()
        path = train_bpe.train_byte_level_bpe(
            [str(corpus)], vocab_size, directory / f"bpe_{how}" / "vocab.json", pre_tokenize=how
        )
        out["byte_level_bpe"][how] = (path, time.perf_counter() - start)
    return out


def tokenizer_of(kind, path):
    if kind == "wordpiece":
        return BertTokenizer(path, **CASED)
    return ByteLevelBPETokenizer(path)


def roberta_tiny(directory):
    """bert_tiny's size with RoBERTa's shape (one segment, positions past
    the padding id, byte-level BPE), as an architecture directory."""
    directory.mkdir(parents=True, exist_ok=True)
    backbone = dict(vocabulary_size=8000, num_layers=2, num_heads=2, hidden_dim=128)
    backbone.update(intermediate_dim=512, num_segments=1, use_pooler=False)
    backbone.update(activation="gelu", dropout=0.1, max_sequence_length=130)
    backbone.update(layer_norm_epsilon=1e-5, position_padding_id=1)
    document = {
        "name": "roberta_tiny",
        "backbone": backbone,
        "tokenizer": {"kind": "byte_level_bpe"},
        "metadata": {"model_type": "roberta"},
    }
    (directory / "config.json").write_text(json.dumps(document), encoding="utf-8")
    return directory


def pretrain(preset, vocabulary, corpus, output, seed, steps):
    config = PretrainConfig(
        preset=str(preset),
        vocab=str(vocabulary),
        corpus=(str(corpus),),
        corpus_layout="documents",
        objective="none",
        seq_len=(64,),
        steps=(steps,),
        batch_size=32,
        learning_rate=2e-3,
        seed=seed,
        verbose=0,
        output=str(output),
        checkpoint_every=max(steps, 1),
        **(CASED if Path(vocabulary).suffix == ".txt" else {}),
    )
    start = time.perf_counter()
    metrics = run_pretraining(config)
    return {
        "masked_lm_accuracy": round(metrics["final_masked_lm_accuracy"], 4),
        "loss": round(metrics["final_loss"], 4),
        "initial_loss": round(metrics["initial_loss"], 4),
        "eval_examples": metrics.get("eval_examples"),
        "seconds": round(time.perf_counter() - start, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output", default=str(RESULTS / "morpheme_vocab.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    lines, sources = corpus_lines()
    held_out = lines[::10]
    training = [line for i, line in enumerate(lines) if i % 10]
    directory = Path(tempfile.mkdtemp())
    corpus = directory / "training.txt"
    corpus.write_text("".join(line + "\n" for line in training), encoding="utf-8")
    vocabularies = train_vocabularies(corpus, directory, args.vocab_size)
    fits = {}
    for kind, runs in vocabularies.items():
        fits[kind] = {}
        for how, (path, seconds) in runs.items():
            tokenizer = tokenizer_of(kind, path)
            fits[kind][how] = {
                "vocabulary_size": tokenizer.vocabulary_size,
                **fit(tokenizer, held_out),
                "training_fit": fit(tokenizer, training[:5000]),
                "seconds": round(seconds, 1),
            }
            print(kind, how, fits[kind][how], flush=True)
    presets = {"wordpiece": "bert_tiny", "byte_level_bpe": roberta_tiny(directory / "rt")}
    mlm = {kind: {how: [] for how in HOW} for kind in vocabularies}
    for seed in args.seeds:
        for kind, runs in vocabularies.items():
            for how, (path, _) in runs.items():
                output = directory / f"run_{kind}_{how}_{seed}"
                row = {
                    "seed": seed,
                    **pretrain(presets[kind], path, corpus, output, seed, args.steps),
                }
                mlm[kind][how].append(row)
                print(kind, how, row, flush=True)
    for kind in mlm:
        for how in HOW:
            rows = mlm[kind][how]
            accuracy = [r["masked_lm_accuracy"] for r in rows]
            mlm[kind][how] = {
                "mean_masked_lm_accuracy": round(sum(accuracy) / len(accuracy), 4),
                "runs": rows,
            }
    result = {
        "benchmark": "morpheme_vocab",
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/morpheme_vocab.py " + " ".join(sys.argv[1:]),
        "machine": {**cpu_info(), "python": platform.python_version()},
        "versions": versions("tensorflow", "keras", "kiwipiepy", "sentencepiece"),
        "corpus": {
            **sources,
            "training_lines": len(training),
            "training_bytes": corpus.stat().st_size,
            "held_out_lines": len(held_out),
            "held_out_words": sum(len(line.split()) for line in held_out),
        },
        "vocab_size": args.vocab_size,
        "fit": fits,
        "mlm": {"steps": args.steps, "batch_size": 32, "seq_len": 64, **mlm},
    }
    Path(args.output).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({"fit": fits, "mlm": result["mlm"]}, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
