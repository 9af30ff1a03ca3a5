"""Publishes a backbone preset and a classifier preset again and again until
it is killed (by tests/reliability/test_publish_race.py).

    python race_writer.py BACKBONE_DIR CLASSIFIER_DIR

Save number i (1, 2, 3, ...) marks every file it writes with i, so a reader
can tell which save each part of a loaded model came from:
- config.json: the description "save i" (and, for the classifier, the label
  names "i-x", "i-y", "i-z" in its task section);
- model.weights.h5: the first transformer block's output bias, all i;
- heads.safetensors: the tensor "cls.predictions.bias", all i;
- task_head.safetensors: the classifier's output bias, all i;
- vocab.txt (both presets): the last token "save<i>";
- finetune.json (the classifier's): serving label names "i-a", "i-b", "i-c".
The backbone preset holds the masked-LM head too (as the pre-training
recipe's does), so fill-mask reads it.
Odd saves come from model A, even ones from model B (other random weights).
It prints "ready", then "saved i" after each pair of saves (flushed).
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import bertzoo  # noqa: E402
from bertzoo.io.publish import publish_directory  # noqa: E402

SIZE = dict(
    vocabulary_size=61,
    num_layers=2,
    num_heads=2,
    hidden_dim=10,
    intermediate_dim=26,
    max_sequence_length=16,
    dropout=0.0,
)


def model(seed):
    keras.utils.set_random_seed(seed)
    backbone = bertzoo.BertBackbone(**SIZE)
    pretrainer = bertzoo.BertPretrainer(backbone, objective="none")
    heads = pretrainer.head_tensors()
    return bertzoo.BertClassifier(backbone, num_classes=3), heads


def vocabulary(i):
    """61 tokens, the last one naming save `i`."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return specials + [f"w{j}" for j in range(SIZE["vocabulary_size"] - 6)] + [f"save{i}"]


def mark(classifier, heads, i):
    backbone = classifier.backbone
    bias = backbone.transformer_layers[0].output_dense.bias
    bias.assign(np.full(bias.shape, i, "float32"))
    head = classifier.head.bias
    head.assign(np.full(head.shape, i, "float32"))
    classifier.label_names = [f"{i}-x", f"{i}-y", f"{i}-z"]
    backbone.preset_info = {"description": f"save {i}"}
    heads["cls.predictions.bias"] = np.full((SIZE["vocabulary_size"],), i, "float32")
    backbone.head_tensors = dict(heads)


def save(classifier, i, backbone_dir, classifier_dir):
    tokenizer = bertzoo.BertTokenizer(vocabulary(i))
    backbone = classifier.backbone
    with publish_directory(backbone_dir, "preset") as staging:
        tokenizer.save_to_preset(staging)
        backbone.save_to_preset(staging)
    with publish_directory(classifier_dir, "preset") as staging:
        classifier.save_to_preset(staging, tokenizer=tokenizer)
        serving = {"label_names": [f"{i}-a", f"{i}-b", f"{i}-c"]}
        (staging / "finetune.json").write_text(json.dumps({"serving": serving}))


def main():
    backbone_dir, classifier_dir = Path(sys.argv[1]), Path(sys.argv[2])
    models = [model(1), model(2)]
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        classifier, heads = models[i % 2]
        mark(classifier, heads, i)
        save(classifier, i, backbone_dir, classifier_dir)
        print(f"saved {i}", flush=True)


if __name__ == "__main__":
    main()
