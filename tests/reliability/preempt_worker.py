"""Runs a recipe again and again on one output until it finishes, for
tests/reliability/test_preemption.py, which sends it SIGTERM at random steps.

    python preempt_worker.py SPEC.json

SPEC: {"recipe": "pretrain" | "finetune" | "distill", "args": [recipe flags, no
--output], "output": DIR, "reference": DIR or null, "double": [trial
numbers], "trials": most trials}.

- With a reference directory, the recipe first runs there uninterrupted.
- Then trial 1, 2, ... each run `main(args + ["--output", output])` in this
  process (a rerun resumes), printing "trial N" before and "trial N rc R"
  after, until one returns 0.
- Every trained step prints "trained step G" (G: the global step) before the
  run looks for a signal at that step boundary: the log of the last step
  completed.
- In the trials listed in "double", the first file of a checkpoint written
  while a stop is pending sends this process a second SIGTERM, in the middle
  of that save.

Output goes to stderr (with the runs' log lines), flushed line by line.
"""

import importlib
import json
import os
import signal
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bertzoo.training import checkpoint, distill_task, finetune_loop, pretrain  # noqa: E402
from bertzoo.training.preemption import StopAtStep  # noqa: E402


def say(text):
    print(text, file=sys.stderr, flush=True)


class LoggedStop(StopAtStep):
    def on_train_batch_end(self, batch, logs=None):
        say(f"trained step {self._epoch_start + batch + 1}")
        super().on_train_batch_end(batch, logs)


def _pending():
    """Whether a training loop has noted a signal (the handler in place is
    a `StopSignals`' and it holds one)."""
    handler = signal.getsignal(signal.SIGTERM)
    return getattr(getattr(handler, "__self__", None), "received", None) is not None


def _second_signal_during_saves():
    fsync = checkpoint.fsync_path
    sent = []

    def fsync_path(path, directory=False):
        if _pending() and not sent:
            sent.append(path)
            say(f"second SIGTERM while writing {Path(path).name}")
            os.kill(os.getpid(), signal.SIGTERM)
        return fsync(path, directory=directory)

    return fsync_path


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    module = {"pretrain": pretrain, "finetune": finetune_loop, "distill": distill_task}[
        spec["recipe"]
    ]
    module.StopAtStep = LoggedStop
    recipe = importlib.import_module(f"recipes.{spec['recipe']}")
    if spec.get("reference"):
        say(f"reference rc {recipe.main([*spec['args'], '--output', spec['reference']])}")
    fsync = checkpoint.fsync_path
    for trial in range(1, spec["trials"] + 1):
        checkpoint.fsync_path = (
            _second_signal_during_saves() if trial in spec.get("double", ()) else fsync
        )
        say(f"trial {trial}")
        rc = recipe.main([*spec["args"], "--output", spec["output"]])
        say(f"trial {trial} rc {rc}")
        if rc == 0:
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
