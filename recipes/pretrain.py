"""Pre-train a BERT-family model with masked LM (+ NSP or SOP), or ELECTRA's
replaced-token detection (--objective electra).

With no arguments it pre-trains `bert_tiny` on a built-in English corpus (the
Python reference manual's help topics, installed with Python: no download)
with a vocabulary trained on that corpus, in a few minutes on 2 CPU cores,
and writes runs/pretrain/: preset/ (config, weights, vocabulary; load it with
`bertzoo.BertBackbone.from_preset("runs/pretrain/preset")`), logs/
(TensorBoard), checkpoints/ and metrics.json.

Rerunning the same command resumes from the last checkpoint.

Examples:
    python recipes/pretrain.py
    python recipes/pretrain.py --objective electra --output runs/electra
    python recipes/pretrain.py --corpus ko.txt --no-lowercase --no-strip-accents \\
        --masking whole_word --preset albert_base --seq-len 128,512 --steps 9000,1000
    python recipes/pretrain.py --strategy tpu --tpu my-tpu --data gs://b/seq128,gs://b/seq512 ...
"""

import json
import os
import sys

from bertzoo.quiet import quiet_tensorflow

quiet_tensorflow()  # before anything imports TensorFlow (BERTZOO_TF_LOGS=1: its logs)


def build_parser():
    # The settings alone: --help (and a bad flag) answer without TensorFlow.
    from bertzoo.training.pretrain_config import PretrainConfig
    from bertzoo.training.runs import recipe_parser

    return recipe_parser(
        __doc__,
        PretrainConfig,
        ("model", "data", "training", "output"),
        prog="python recipes/pretrain.py",
    )


def main(argv=None):
    parser = build_parser()
    parser.parse_args(argv)  # --help and bad flags answer here, before TensorFlow loads
    from bertzoo.training.pretrain import PRESET_DIR, PretrainConfig, run_pretraining
    from bertzoo.training.runs import LOG_DIR, METRICS_FILE, recipe_exit, run_recipe

    args, metrics, error = run_recipe(parser, PretrainConfig, run_pretraining, argv)
    if error is not None:
        return recipe_exit(error)
    keys = (
        "initial_masked_lm_accuracy",
        "final_masked_lm_accuracy",
        # ELECTRA: the discriminator's held-out replaced-token detection
        "initial_rtd_accuracy",
        "final_rtd_accuracy",
        "final_rtd_precision",
        "final_rtd_recall",
        "steps",
        "examples_per_second",
    )
    shown = {k: metrics[k] for k in keys if k in metrics}
    if shown.get("examples_per_second", 0) is None:
        del shown["examples_per_second"]  # no step ran: nothing was timed
    print(json.dumps(shown, indent=2))
    if "examples_per_second" not in shown:
        print(
            f"No training step ran: the run was already at step {metrics['steps']}; "
            "examples_per_second is measured only on the steps a run trains."
        )
    print(
        f"preset: {os.path.join(args.output, PRESET_DIR)}  "
        f"metrics: {os.path.join(args.output, METRICS_FILE)}  "
        f"TensorBoard: tensorboard --logdir {os.path.join(args.output, LOG_DIR)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
