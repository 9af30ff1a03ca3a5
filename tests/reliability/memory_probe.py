"""Loads hostile files one after the other in this process and reports, for
each, the error it raised, the seconds it took and the memory it took (by
tests/reliability/test_hostile_files.py).

    python memory_probe.py CASES_JSON

CASES_JSON is a list of {"name", "call", "path"}; call is "backbone"
(`BertBackbone.from_preset(path)`), "architecture"
(`BertBackbone.from_preset(path, load_weights=False)`), "torch_pickle"
(`read_torch_pickle(path)`), a tokenizer made from the file at path
("wordpiece", "byte_bpe", "sentencepiece"), a prepared corpus opened
("prepared") or a LoRA adapter loaded onto its base ("lora": path/base,
path/adapter). The first case is a warm-up (a valid preset),
so imports are not counted against the others. For each case it prints one
JSON line {"name", "error", "seconds", "growth_mib"}: growth_mib is the peak
resident memory during the call (VmHWM, reset before it through
/proc/self/clear_refs) less the resident memory before it.
"""

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bertzoo  # noqa: E402
from bertzoo.convert.torch_pickle import read_torch_pickle  # noqa: E402


def _status_kib(key):
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_peak():
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # resets VmHWM to the current resident size (Linux >= 4.0)


CALLS = {
    "backbone": lambda path: bertzoo.BertBackbone.from_preset(path),
    "architecture": lambda path: bertzoo.BertBackbone.from_preset(path, load_weights=False),
    "torch_pickle": read_torch_pickle,
    # Tokenizer files, given by path: vocab.txt, a vocab.json directory
    # (with its merges.txt), a SentencePiece model (XLM-R's).
    "wordpiece": lambda path: bertzoo.BertTokenizer(path),
    "byte_bpe": lambda path: bertzoo.tokenizers.ByteLevelBPETokenizer(path),
    "sentencepiece": lambda path: bertzoo.tokenizers.XLMRobertaTokenizer(path),
    # A prepared corpus directory, opened for training.
    "prepared": lambda path: __import__("bertzoo.data.shards").data.shards.open_prepared(path),
    # A directory holding base/ (a classifier preset) and adapter/ (a LoRA
    # adapter for it): the adapter loaded onto the base.
    "lora": lambda path: bertzoo.BertClassifier.from_preset(Path(path) / "base").load_lora_adapter(
        Path(path) / "adapter"
    ),
}


def main():
    for case in json.loads(sys.argv[1]):
        _reset_peak()
        before = _status_kib("VmRSS")
        started = time.monotonic()
        error = None
        try:
            CALLS[case["call"]](case["path"])
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        seconds = time.monotonic() - started
        growth = (_status_kib("VmHWM") - before) / 1024
        report = {"name": case["name"], "error": error, "seconds": seconds, "growth_mib": growth}
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
