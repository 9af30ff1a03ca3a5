"""What verifying a preset's files costs when it loads: a `bert_base`
preset (random weights, about 438 MB) is saved to a temporary directory,
then, with its files in the page cache:

- one SHA-256 pass over the files (`verify_directory`, forced, the
  in-process cache of verified files cleared each time);
- the whole `BertBackbone.from_preset` with verification on and off
  (`BERTZOO_VERIFY`), the cache cleared each time.

Medians of `--rounds`, alternating; writes benchmarks/results/verify_cost.json.

    python benchmarks/verify_cost.py [--rounds 3]
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common import RESULTS, cpu_info, versions  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import keras

    import bertzoo
    from bertzoo.io import manifest

    with tempfile.TemporaryDirectory() as tmp:
        preset = Path(tmp) / "bert_base"
        bertzoo.BertBackbone.from_preset("bert_base", load_weights=False).save_to_preset(preset)
        size = sum(p.stat().st_size for p in preset.rglob("*") if p.is_file())

        def timed(call):
            manifest._verified.clear()
            start = time.perf_counter()
            call()
            return time.perf_counter() - start

        def load(verify):
            os.environ["BERTZOO_VERIFY"] = "1" if verify else "0"
            bertzoo.BertBackbone.from_preset(preset)
            keras.backend.clear_session()

        times = {"verify": [], "load_verified": [], "load_unverified": []}
        timed(lambda: load(True))  # warm-up: page cache, imports
        for _ in range(args.rounds):
            times["verify"].append(timed(lambda: manifest.verify_directory(preset, force=True)))
            times["load_verified"].append(timed(lambda: load(True)))
            times["load_unverified"].append(timed(lambda: load(False)))
        os.environ.pop("BERTZOO_VERIFY")

    medians = {k: round(statistics.median(v), 3) for k, v in times.items()}
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "preset": "bert_base (random weights)",
        "megabytes": round(size / 1e6, 1),
        "seconds": medians,
        "all_seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
        "rounds": args.rounds,
        "cpu": cpu_info(),
        "versions": versions("keras", "tensorflow"),
        "backend": keras.backend.backend(),
    }
    print(json.dumps(medians), f"{result['megabytes']} MB")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "verify_cost.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
