"""Writes bertzoo files in an endless loop until it is killed (kill -9 by
tests/reliability/test_faults.py).

    python kill_worker.py preset|checkpoint|export TARGET

It builds two different tiny models, A and B (other widths, other weights),
prints "ready" once set up, then alternates saving A and B to TARGET:
- preset: `BertClassifier.save_to_preset(TARGET, tokenizer=...)`;
- checkpoint: `CheckpointManager(TARGET).save(model, step)` with steps 1, 2,
  3, ... (A on odd steps, B on even), keep=2;
- export: `export_serving(preset_X, TARGET, overwrite=True)` from task
  presets of A and B written first beside TARGET.
Each completed save prints "saved <A|B>" (flushed), so the test knows what
a kill may have interrupted.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import keras  # noqa: E402

import bertzoo  # noqa: E402
from bertzoo.training import make_optimizer  # noqa: E402
from bertzoo.training.checkpoint import CheckpointManager  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(56)]
# Two architectures: a config from one beside the weights of the other fails
# to load, so a mixed directory cannot pass for either.
SIZES = {
    "A": dict(hidden_dim=10, intermediate_dim=26),
    "B": dict(hidden_dim=12, intermediate_dim=30),
}


def classifier(name):
    keras.utils.set_random_seed(1 if name == "A" else 2)
    backbone = bertzoo.BertBackbone(
        vocabulary_size=61,
        num_layers=2,
        num_heads=2,
        max_sequence_length=16,
        dropout=0.0,
        **SIZES[name],
    )
    model = bertzoo.BertClassifier(backbone, num_classes=3, label_names=["x", "y", "z"])
    model.compile(optimizer=make_optimizer("adamw", 1e-3, total_steps=10))
    return model


def main():
    kind, target = sys.argv[1], Path(sys.argv[2])
    tokenizer = bertzoo.BertTokenizer(VOCAB)
    models = {name: classifier(name) for name in SIZES}
    if kind == "preset":

        def save(name, _):
            models[name].save_to_preset(target, tokenizer=tokenizer)
    elif kind == "checkpoint":
        manager = CheckpointManager(target, keep=2)
        pretrainers = {}
        for name in SIZES:
            keras.utils.set_random_seed(1 if name == "A" else 2)
            p = bertzoo.BertPretrainer(models[name].backbone, objective="nsp")
            p.compile(optimizer=make_optimizer("adamw", 1e-3, total_steps=10))
            pretrainers[name] = p

        def save(name, step):
            manager.save(pretrainers[name], step, {"model": name})
    elif kind == "export":
        sources = {}
        for name in SIZES:
            sources[name] = target.parent / f"source_{name}"
            if not (sources[name] / "config.json").is_file():
                models[name].save_to_preset(sources[name], tokenizer=tokenizer)

        def save(name, _):
            bertzoo.export_serving(sources[name], target, overwrite=True, sequence_length=16)
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    print("ready", flush=True)
    step = 0
    while True:
        step += 1
        name = "A" if step % 2 else "B"
        save(name, step)
        print(f"saved {name}", flush=True)


if __name__ == "__main__":
    main()
