"""Pre-train a BERT-family model with masked LM (+ NSP or SOP).

With no arguments it pre-trains `bert_tiny` on a built-in English corpus (the
Python reference manual's help topics, installed with Python: no download)
with a vocabulary trained on that corpus, in a few minutes on 2 CPU cores,
and writes runs/pretrain/: preset/ (config, weights, vocabulary; load it with
`bertzoo.BertBackbone.from_preset("runs/pretrain/preset")`), logs/
(TensorBoard), checkpoints/ and metrics.json.

Rerunning the same command resumes from the last checkpoint.

Examples:
    python recipes/pretrain.py
    python recipes/pretrain.py --corpus ko.txt --no-lowercase --no-strip-accents \\
        --masking whole_word --preset albert_base --seq-len 128,512 --steps 9000,1000
    python recipes/pretrain.py --strategy tpu --tpu my-tpu --data gs://b/seq128,gs://b/seq512 ...
"""

import argparse
import json
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build_parser():
    from bertzoo.cli import comma_ints, comma_strings
    from bertzoo.training.pretrain import (
        DATA_MODES, MASKING_CHOICES, OBJECTIVE_CHOICES, PRECISIONS, PretrainConfig,
    )
    from bertzoo.training.distribute import STRATEGIES
    from bertzoo.training.optimizers import OPTIMIZERS

    d = PretrainConfig()
    p = argparse.ArgumentParser(
        prog="python recipes/pretrain.py",
        description=__doc__.split("\n\n")[0],
        epilog="Full description: see the module docstring and README ('Pre-training').",
    )
    g = p.add_argument_group("model")
    g.add_argument("--preset", default=d.preset,
                   help="built-in preset name (random init) or a preset/HF directory (continue pre-training); default %(default)s")
    g.add_argument("--objective", default=d.objective, choices=OBJECTIVE_CHOICES,
                   help="sentence objective; auto: nsp for BERT, sop for ALBERT-shaped models, none without a pooler")
    g.add_argument("--dropout", type=float, default=d.dropout, help="override the preset's dropout")
    g = p.add_argument_group("data")
    g.add_argument("--corpus", type=comma_strings, default=d.corpus,
                   help="comma-separated text files or globs (one sentence per line, blank line between "
                        "documents); default: the built-in corpus")
    g.add_argument("--corpus-layout", default=d.corpus_layout, choices=("sentences", "documents"),
                   help="'documents': one document per line")
    g.add_argument("--vocab", default=d.vocab,
                   help="vocab.txt or spiece.model; default: the preset directory's, else trained on the corpus")
    g.add_argument("--vocab-size", type=int, default=d.vocab_size, help="size of a trained vocabulary")
    g.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=d.lowercase,
                   help="default: the preset's setting")
    g.add_argument("--strip-accents", action=argparse.BooleanOptionalAction, default=d.strip_accents,
                   help="default: follows --lowercase; use --no-strip-accents for Korean (keeps Hangul syllables whole)")
    g.add_argument("--masking", default=d.masking, choices=MASKING_CHOICES, help="default %(default)s")
    g.add_argument("--mask-rate", type=float, default=d.mask_rate)
    g.add_argument("--max-predictions", type=comma_ints, default=d.max_predictions_per_seq,
                   help="prediction slots per phase; default ceil(seq_len * mask_rate)")
    g.add_argument("--seq-len", type=comma_ints, default=d.seq_len,
                   help="sequence length per phase, e.g. 128,512; default %(default)s")
    g.add_argument("--data-mode", default=d.data_mode, choices=DATA_MODES,
                   help="dynamic: re-masked every epoch in tf.data; static: masked TFRecords (dupe factor)")
    g.add_argument("--data", type=comma_strings, default=d.data,
                   help="comma-separated TFRecord directories, one per phase (from write_pretraining_tfrecords)")
    g.add_argument("--dupe-factor", type=int, default=d.dupe_factor)
    g.add_argument("--eval-fraction", type=float, default=d.eval_fraction,
                   help="held-out documents for the initial/final evaluation")
    g.add_argument("--seed", type=int, default=d.seed)
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=comma_ints, default=d.steps, help="steps per phase, e.g. 900,100; default %(default)s")
    g.add_argument("--batch-size", type=int, default=d.batch_size, help="global batch size")
    g.add_argument("--learning-rate", type=float, default=d.learning_rate)
    g.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS)
    g.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="default: 10%% of all steps")
    g.add_argument("--weight-decay", type=float, default=d.weight_decay)
    g.add_argument("--gradient-accumulation", type=int, default=d.gradient_accumulation_steps,
                   help="update the weights every N batches (steps still count batches)")
    g.add_argument("--precision", default=d.precision, choices=PRECISIONS,
                   help="mixed_float16 adds dynamic loss scaling")
    g.add_argument("--strategy", default=d.strategy, choices=STRATEGIES,
                   help="tpu / mirrored / multi_worker (TF_CONFIG) / default; data_parallel on JAX")
    g.add_argument("--tpu", default=d.tpu, help="TPU name or grpc:// address (with --strategy tpu)")
    g.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=d.jit_compile)
    g.add_argument("--steps-per-execution", type=int, default=d.steps_per_execution)
    g = p.add_argument_group("output")
    g.add_argument("--output", default=d.output, help="default %(default)s")
    g.add_argument("--resume", action=argparse.BooleanOptionalAction, default=d.resume,
                   help="resume from --output's last checkpoint (default); --no-resume starts over, deleting what "
                        "earlier runs wrote there (never files bertzoo did not write)")
    g.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)
    g.add_argument("--log-every", type=int, default=d.log_every, help="TensorBoard interval (steps)")
    g.add_argument("--verbose", type=int, default=d.verbose, choices=(0, 1, 2), help="Keras progress output")
    return p


def config_from_args(args):
    from bertzoo.training.pretrain import PretrainConfig

    return PretrainConfig(
        preset=args.preset, corpus=args.corpus, corpus_layout=args.corpus_layout, vocab=args.vocab,
        vocab_size=args.vocab_size, lowercase=args.lowercase, strip_accents=args.strip_accents,
        objective=args.objective, masking=args.masking, mask_rate=args.mask_rate,
        max_predictions_per_seq=args.max_predictions, seq_len=args.seq_len, steps=args.steps,
        batch_size=args.batch_size, learning_rate=args.learning_rate, optimizer=args.optimizer,
        warmup_steps=args.warmup_steps, weight_decay=args.weight_decay,
        gradient_accumulation_steps=args.gradient_accumulation, dropout=args.dropout,
        precision=args.precision, strategy=args.strategy, tpu=args.tpu, jit_compile=args.jit_compile,
        steps_per_execution=args.steps_per_execution, data_mode=args.data_mode, data=args.data,
        dupe_factor=args.dupe_factor, eval_fraction=args.eval_fraction, seed=args.seed,
        output=args.output, resume=args.resume, checkpoint_every=args.checkpoint_every,
        log_every=args.log_every, verbose=args.verbose,
    )


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from bertzoo.errors import BertzooError
    from bertzoo.training.pretrain import run_pretraining

    # Bad settings, inputs or output, another run on --output, a NaN loss:
    # one line saying what is wrong, no traceback.
    try:
        metrics = run_pretraining(config_from_args(args))
    except BertzooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    keys = ("initial_masked_lm_accuracy", "final_masked_lm_accuracy", "steps", "examples_per_second")
    print(json.dumps({k: metrics.get(k) for k in keys}, indent=2))
    print(f"preset: {os.path.join(args.output, 'preset')}  metrics: {os.path.join(args.output, 'metrics.json')}  "
          f"TensorBoard: tensorboard --logdir {os.path.join(args.output, 'logs')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
