"""Subprocess helper of test_distribute.py: one worker of a pre-training run
(`run_pretraining`) under strategy multi_worker, its `TF_CONFIG` from the
environment.

    python tests/training/pretrain_worker.py --config config.json --out out.json

`config.json` holds `PretrainConfig` keyword arguments. `out.json` gets the
run's metrics and the shards this worker's stream built examples of, in
order, as [reader_index, num_readers, epoch, index in the epoch's shard
order, shard index].
"""

import argparse
import json
import sys
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from bertzoo.data import shards

    seen = []
    examples = shards.ExampleStream.examples

    def recording(self, epoch, shard):
        settings = self.settings
        index = self.shard_order(epoch)[shard]
        seen.append([settings.reader_index, settings.num_readers, epoch, shard, index])
        return examples(self, epoch, shard)

    shards.ExampleStream.examples = recording

    from bertzoo.training.pretrain import PretrainConfig, run_pretraining

    settings = json.loads(Path(args.config).read_text(encoding="utf-8"))
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}
    metrics = run_pretraining(PretrainConfig(**settings))
    Path(args.out).write_text(json.dumps({"metrics": metrics, "shards": seen}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
