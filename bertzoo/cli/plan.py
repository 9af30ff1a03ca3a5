"""The plan command: memory, largest batch and FLOPs of a step."""

import json
import sys


def add_plan(sub):
    from bertzoo import planner

    p = sub.add_parser(
        "plan",
        help="memory, largest batch and FLOPs of a preset's training or inference step",
        description=(
            "Plans one step of PRESET (a built-in name, a preset or Hugging Face directory) "
            "from its architecture: weights, gradients, optimizer state, activations per "
            "sequence, the largest batch that fits --memory, FLOPs per step and, with "
            "--tflops, the time per step. Calibrated on the XLA-compiled step "
            "(benchmarks/plan_calibration.py)."
        ),
    )
    p.add_argument(
        "preset", metavar="PRESET", help="a built-in name, a preset or Hugging Face directory"
    )
    p.add_argument(
        "--seq-len", type=int, default=512, help="tokens per sequence (default %(default)s)"
    )
    p.add_argument(
        "--memory", default="12GiB", help="device memory, e.g. 12GiB or 80GB (default %(default)s)"
    )
    p.add_argument(
        "--precision",
        default="float32",
        choices=planner.PRECISIONS,
        help="weights and activations (default %(default)s)",
    )
    p.add_argument(
        "--optimizer",
        default="adamw",
        choices=planner.OPTIMIZERS,
        help="its state per weight counts (default %(default)s)",
    )
    p.add_argument(
        "--mode",
        default="finetune",
        choices=planner.MODES,
        help="the step planned (default %(default)s)",
    )
    p.add_argument(
        "--gradient-accumulation",
        type=int,
        default=1,
        metavar="N",
        help="micro-batches per optimizer step (default %(default)s)",
    )
    p.add_argument(
        "--attention",
        default="auto",
        choices=planner.ATTENTION_PATHS,
        help="auto: bertzoo's attention (keeps the S x S probabilities); flash: a kernel that keeps none",
    )
    p.add_argument(
        "--tflops", type=float, default=None, help="device peak TFLOP/s, for the time per step"
    )
    p.add_argument(
        "--utilisation",
        type=float,
        default=0.4,
        help="share of --tflops reached (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def plan_command(args):
    """`plan`: returns the exit status (2: bad input, one line)."""

    from bertzoo.errors import BertzooError
    from bertzoo.planner import plan

    try:
        result = plan(
            args.preset,
            seq_len=args.seq_len,
            memory=args.memory,
            precision=args.precision,
            optimizer=args.optimizer,
            mode=args.mode,
            gradient_accumulation=args.gradient_accumulation,
            attention=args.attention,
            tflops=args.tflops,
            utilisation=args.utilisation,
        )
    except (BertzooError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result.as_dict(), indent=1) if args.json else result.table())
    return 0
