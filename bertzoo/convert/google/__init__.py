"""Google's original TF1 checkpoints -> a bertzoo preset directory.

Reads the checkpoints released with google-research/bert
(`bert_model.ckpt.{index,data-*}` + `bert_config.json` + `vocab.txt`),
google-research/albert (`model.ckpt-best.*` + `albert_config.json` +
`30k-clean.model`) and google-research/electra (a checkpoint + `vocab.txt`,
no model config; the same layout in KoELECTRA's and Chinese-ELECTRA's TF1
checkpoints), and writes `config.json`, `model.weights.h5`,
`heads.safetensors` (the pre-training heads, in Hugging Face names and
layouts) and the vocabulary (`vocab.txt` or `spiece.model`).
An ELECTRA checkpoint's generator becomes a complete preset of its own in
the `generator/` subdirectory of the discriminator's.

One module per family describes its variable names, config and vocabulary
as data (a `GoogleFamily`: `bert`, `albert`, `electra`, listed in
`families`), as the reference code creates them (google-research/bert
modeling.py + run_pretraining.py, google-research/albert modeling.py +
run_pretraining.py, google-research/electra model/modeling.py +
run_pretraining.py); `checkpoint` reads any of them, `weights` fills a
backbone and writes the preset, `files` finds the files.

Numerics of the reference code that the converted preset keeps: BERT's and
ALBERT's "gelu" is the tanh approximation (bertzoo "gelu_approximate"),
ELECTRA's the exact erf form (bertzoo "gelu"); LayerNorm epsilon 1e-12
(tf.contrib.layers.layer_norm, which all three use), post-LN blocks.

Downloads of the official archives: `bertzoo.convert.download`.
"""

from bertzoo.convert.google.checkpoint import read_google_checkpoint
from bertzoo.convert.google.electra import electra_config, electra_model_keys
from bertzoo.convert.google.families import (
    FAMILIES,
    MODEL_TYPES,
    detect_model_type,
    google_config_to_backbone,
)
from bertzoo.convert.google.files import infer_lowercase
from bertzoo.convert.google.spec import GoogleCheckpoint, GoogleFamily
from bertzoo.convert.google.weights import load_google_weights, save_google_preset

__all__ = [
    "FAMILIES",
    "MODEL_TYPES",
    "GoogleCheckpoint",
    "GoogleFamily",
    "detect_model_type",
    "electra_config",
    "electra_model_keys",
    "google_config_to_backbone",
    "infer_lowercase",
    "load_google_weights",
    "read_google_checkpoint",
    "save_google_preset",
]
