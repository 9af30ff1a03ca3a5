"""Fine-tuning models: one small head per task on a `BertBackbone`.

- `BertClassifier`: texts or text pairs -> classes (`num_classes >= 2`) or a
  score (`num_classes=1`, regression with mean squared error).
- `BertTokenClassifier`: one label per token; label -100 marks positions
  that are not scored (padding, special tokens, and the non-first
  sub-tokens of a word).
- `BertSpanQA`: start and end logits per token for extractive QA.

All three take the backbone's inputs (`token_ids`, `segment_ids` when the
backbone has segment embeddings, `padding_mask`), build their loss and
metrics in `compile` (called with defaults by `fit` and `evaluate` when you
have not), and save to / load from a preset directory: the
backbone files plus a `task` section in `config.json` and the head's
weights in `task_head.safetensors`. `from_preset` also loads the task heads
of Hugging Face checkpoints (`*ForSequenceClassification`,
`*ForTokenClassification`, `*ForQuestionAnswering`).

`BertClassifier` also takes strings, as keras-hub's tasks do: `from_preset`
on a preset with a vocabulary attaches its `BertPreprocessor` as
`model.preprocessor`, and `fit`, `evaluate`, `predict` and `predict_proba`
pack texts through it (`bertzoo.models.text_inputs`). `predict` returns
logits; `predict_proba` returns probabilities (softmax over the classes).
"""

import logging

import keras
import numpy as np
from keras import ops

from bertzoo import presets as preset_lib
from bertzoo.errors import InputError
from bertzoo.layers.common import get_activation, kernel_initializer
from bertzoo.layers.losses import IGNORE_LABEL, weighted_mean
from bertzoo.layers.pooling import TokenPooling
from bertzoo.loader_registry import preprocessor_factory, preset_loader
from bertzoo.models import litert, text_inputs
from bertzoo.models.backbone import InputChecks
from bertzoo.models.int8 import QuantizeMethods, use_saved_graph
from bertzoo.models.lora import LoraMethods
from bertzoo.models.pretrainer import (
    build_before_tracing,
    compile_from_saved_config,
    finish_loss,
    masked_lm_loss,
    shuffle_default,
)
from bertzoo.models.quantize import check_float
from bertzoo.presets import read_task_section

logger = logging.getLogger(__name__)

# BERT's usual fine-tuning learning rate: a task model's compile() default,
# and the fine-tuning recipe's (`bertzoo.training.finetune.default_learning_rate`).
DEFAULT_LEARNING_RATE = 5e-5

HEAD_FILE = preset_lib.TASK_HEAD_FILE


def _label_names(label_names, count, what):
    if label_names is None:
        return None
    names = [str(n) for n in label_names]
    if len(names) != count:
        raise ValueError(f"label_names has {len(names)} names but the model has {count} {what}.")
    if len(set(names)) != len(names):
        raise ValueError(f"label_names must be distinct, got {names}.")
    return names


# Task kind -> the task model class that serves it (filled by TaskModel subclasses).
TASK_MODELS = {}


class TaskModel(InputChecks, LoraMethods, QuantizeMethods, keras.Model):
    """The base of the task models: inputs (checked as the backbone checks
    them), loss scaling, presets. Subclasses set `kinds` (the task kinds they
    serve, by which `task_model_from_preset` finds them), `kind`,
    `head_layers()`, `hf_head_layers()` and `task_config()`; a subclass
    anywhere (e.g. in a task-kind module) registers itself."""

    def _checked_embeddings(self):
        return self.backbone.embeddings_layer

    kinds = ()
    int8_graph_owner = "task"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for kind in cls.__dict__.get("kinds", ()):
            TASK_MODELS[kind] = cls

    def _backbone_inputs(self, backbone):
        return {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in backbone.input
        }

    def __init__(self, *args, preprocessor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.preprocessor = preprocessor

    def __setattr__(self, name, value):
        # The preprocessor (a tokenizer with its lookup tables) is not a part
        # of the graph: kept out of Keras' layer tracking, so saving, loading
        # and the weights files are the same with or without it.
        if name == "preprocessor":
            if value is not None and not callable(value):
                raise TypeError(
                    f"preprocessor must be a bertzoo.BertPreprocessor (or a callable "
                    f"texts -> input dict) or None, got {type(value).__name__}."
                )
            object.__setattr__(self, "_preprocessor", value)
            return
        super().__setattr__(name, value)

    @property
    def preprocessor(self):
        """The `BertPreprocessor` that turns texts into this model's inputs
        (attached by `from_preset` when the preset holds a vocabulary), or
        None: then the model takes token-id dicts only. Not saved in `.keras`
        files; assign one after loading (`model.preprocessor =
        bertzoo.BertPreprocessor.from_preset(preset)`)."""
        return getattr(self, "_preprocessor", None)

    # Whether strings are a well-defined input of this task (see `fit`).
    takes_texts = False
    # The compile() defaults: the optimizer "auto" builds.
    default_learning_rate = DEFAULT_LEARNING_RATE

    def compile(self, optimizer="auto", loss=None, **kwargs):
        """`keras.Model.compile` with the task loss and metrics built in:
        pass the optimizer (and e.g. `jit_compile`), not `loss`.
        `optimizer="auto"` (the default) is `keras.optimizers.Adam` at
        `default_learning_rate` (5e-5, the usual BERT fine-tuning rate);
        `fit` and `evaluate` call `compile()` themselves when you have not."""
        if loss is not None:
            raise ValueError(
                f"{type(self).__name__} computes its task loss itself; call compile() without loss=."
            )
        if isinstance(optimizer, str) and optimizer == "auto":
            optimizer = keras.optimizers.Adam(self.default_learning_rate)
        super().compile(optimizer=optimizer, **kwargs)

    def compile_from_config(self, config):
        compile_from_saved_config(self, config)

    # === Texts in fit / evaluate / predict ===

    def _texts_preprocessor(self, x):
        """The preprocessor for text input `x`, or a one-line error saying
        what this model takes."""
        name = type(self).__name__
        if not self.takes_texts:
            raise InputError(
                f"{name} takes token-id dicts (token_ids, segment_ids, padding_mask), not "
                f"strings: {self.texts_hint}"
            )
        if self.preprocessor is None:
            raise InputError(
                f"{name} has no preprocessor, so it takes token-id dicts (token_ids, "
                "segment_ids, padding_mask), not strings: load it with from_preset on a "
                "preset directory that holds a vocabulary, or set model.preprocessor = "
                "bertzoo.BertPreprocessor.from_preset(preset)."
            )
        return self.preprocessor

    texts_hint = ""

    def _data_inputs(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        """`(x, y, sample_weight, converted)`: text input packed into a
        `tf.data.Dataset` through the preprocessor; anything else unchanged."""
        if text_inputs.is_dataset(x):
            layout = text_inputs.dataset_text_layout(x)
            if layout is None:
                return x, y, sample_weight, False
            return text_inputs.map_texts(x, self._texts_preprocessor(x), layout), y, None, True
        if not text_inputs.is_texts(x):
            return x, y, sample_weight, False
        dataset = text_inputs.text_dataset(
            self._texts_preprocessor(x), x, y, sample_weight, batch_size or 32, shuffle
        )
        return dataset, None, None, True

    def _validation(self, validation_data, batch_size):
        if validation_data is None or text_inputs.is_dataset(validation_data):
            return self._data_inputs(validation_data)[0]
        if isinstance(validation_data, tuple) and 2 <= len(validation_data) <= 3:
            x, y, *weights = validation_data
            if text_inputs.is_texts(x):
                sample_weight = weights[0] if weights else None
                return self._data_inputs(x, y, sample_weight, batch_size)[0]
        return validation_data

    def fit(
        self,
        x=None,
        y=None,
        batch_size=None,
        epochs=1,
        verbose="auto",
        callbacks=None,
        validation_split=0.0,
        validation_data=None,
        shuffle=None,
        class_weight=None,
        sample_weight=None,
        initial_epoch=0,
        steps_per_epoch=None,
        validation_steps=None,
        validation_batch_size=None,
        validation_freq=1,
    ):
        """`keras.Model.fit`, also on texts when the model has a
        preprocessor: `x` a list (or array, tensor) of strings, a tuple
        `(texts_a, texts_b)` for pairs, or a `tf.data.Dataset` of batches of
        them (with labels). Compiles with the defaults first if you have not
        called `compile`. `shuffle` defaults to True for in-memory data; a
        dataset is yours to shuffle (`dataset.shuffle(...)`). An int8 model
        (`quantize("int8")`) is for inference: fine-tune the float model."""
        check_float(self, "fit")
        if not self.compiled:
            self.compile()
        if validation_split and text_inputs.is_texts(x):
            if not 0.0 < float(validation_split) < 1.0:
                raise ValueError(f"validation_split must be in (0, 1), got {validation_split}.")
            x, x_val = text_inputs.split_tail(x, validation_split)
            y, y_val = text_inputs.split_tail(y, validation_split)
            sample_weight, w_val = text_inputs.split_tail(sample_weight, validation_split)
            validation_data = (x_val, y_val) if w_val is None else (x_val, y_val, w_val)
            validation_split = 0.0
        shuffle = shuffle_default(x, shuffle)
        in_memory = text_inputs.is_texts(x)
        count = text_inputs.count(x) if in_memory else None
        x, y, sample_weight, converted = self._data_inputs(x, y, sample_weight, batch_size, shuffle)
        if in_memory and steps_per_epoch is None:
            # One pass over the texts per epoch from one repeated dataset:
            # tf.data starts the tokenizer's graph once, not every epoch.
            x = x.repeat()
            steps_per_epoch = -(-count // (batch_size or 32))
        validation_data = self._validation(
            validation_data, validation_batch_size or batch_size or 32
        )
        if converted:
            batch_size, shuffle = None, False
        build_before_tracing(self, x)
        return super().fit(
            x,
            y,
            batch_size=batch_size,
            epochs=epochs,
            shuffle=shuffle,
            sample_weight=sample_weight,
            validation_split=validation_split,
            validation_data=validation_data,
            validation_batch_size=None if converted else validation_batch_size,
            verbose=verbose,
            callbacks=callbacks,
            class_weight=class_weight,
            initial_epoch=initial_epoch,
            steps_per_epoch=steps_per_epoch,
            validation_steps=validation_steps,
            validation_freq=validation_freq,
        )

    def evaluate(
        self,
        x=None,
        y=None,
        batch_size=None,
        verbose="auto",
        sample_weight=None,
        steps=None,
        callbacks=None,
        return_dict=False,
        **kwargs,
    ):
        """`keras.Model.evaluate`, also on texts (see `fit`)."""
        if not self.compiled:
            self.compile()
        x, y, sample_weight, converted = self._data_inputs(x, y, sample_weight, batch_size)
        return super().evaluate(
            x,
            y,
            batch_size=None if converted else batch_size,
            verbose=verbose,
            sample_weight=sample_weight,
            steps=steps,
            callbacks=callbacks,
            return_dict=return_dict,
            **kwargs,
        )

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """The model's raw outputs: logits (see the class docstring), for a
        dict of token ids, a dataset, or texts when the model has a
        preprocessor (see `fit`). `predict_proba` gives probabilities.
        In-memory texts are packed by one traced function (not a dataset
        per call) and run as token ids: in length-sorted batches through a
        forward pass compiled once, or after `quantize("int8")` on LiteRT
        through the int8 graph (`bertzoo.models.int8`)."""
        if text_inputs.is_texts(x) and steps is None and callbacks is None:
            cache = self.__dict__.setdefault("_bertzoo_text_pack", {})
            chunks = text_inputs.packed_chunks(self._texts_preprocessor(x), x, cache)
            if litert.attached_runner(self) is not None:
                return super().predict(chunks)
            if chunks:
                parts = [super(TaskModel, self).predict(c, batch_size) for c in chunks]
                return keras.tree.map_structure(lambda *a: np.concatenate(a), *parts)
        x, _, _, converted = self._data_inputs(x, batch_size=batch_size)
        return super().predict(
            x,
            batch_size=None if converted else batch_size,
            verbose=verbose,
            steps=steps,
            callbacks=callbacks,
        )

    def predict_proba(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """`predict`, with each logits output turned into probabilities (a
        softmax over its last axis), as numpy float32."""
        if getattr(self, "num_classes", None) == 1:
            raise ValueError(
                f"{type(self).__name__} with num_classes=1 is a regression model: predict() "
                "returns its score; predict_proba is for classifiers."
            )
        outputs = self.predict(
            x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks
        )
        if isinstance(outputs, dict):
            return {k: text_inputs.softmax(v) for k, v in outputs.items()}
        return text_inputs.softmax(outputs)

    # === Presets ===

    def head_layers(self):
        raise NotImplementedError

    def head_variables(self):
        """Variable path -> variable for the task head (not the backbone)."""
        return {v.path: v for layer in self.head_layers() for v in layer.weights}

    @classmethod
    def _kind_of(cls, task):
        return task.get("kind")

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """The backbone of a preset (built-in name, bertzoo directory or
        Hugging Face directory) with this task's head. The head's weights
        are loaded when the directory holds a head of the same task and
        shape (a bertzoo task preset, or an HF `*For<Task>` checkpoint);
        otherwise the head starts from the reference initialiser.

        `kwargs` are this model's constructor arguments (e.g. `num_classes`);
        ones the directory records (class count, label names) default to it.

        `preprocessor`: "auto" (default) attaches the preset's
        `BertPreprocessor` when the task takes texts and the directory holds
        a vocabulary, packing to `sequence_length` (default: the length the
        preset records, e.g. its fine-tuning run's, else the backbone's
        maximum); None attaches none; or pass your own.

        A LiteRT-int8 task preset (`quantize("int8")`, then
        `save_to_preset`) loads with its int8 graph, not converted again,
        under any backend; with a `dtype` or a head other than the saved
        one, the float32 model runs instead, and a warning says so.
        """
        # The backbone, the task section, the head and the vocabulary come
        # from one published version of a directory.
        preprocessor = kwargs.pop("preprocessor", "auto")
        sequence_length = kwargs.pop("sequence_length", None)
        with preset_lib.pinned(preset) as source:
            loader = preset_loader()
            model = loader.load_task_model(cls, source, load_weights=load_weights, **kwargs)
            if isinstance(preprocessor, str) and preprocessor == "auto":
                factory = preprocessor_factory() if cls.takes_texts else None
                preprocessor = factory(source, sequence_length) if factory else None
            model.preprocessor = preprocessor
            if load_weights:
                changed = "dtype" if kwargs.get("dtype") is not None else None
                if not model.head_loaded:
                    changed = changed or "a head other than the saved one"
                use_saved_graph(model, loader.read_int8_graph(source), preset, changed)
            return model

    @classmethod
    def _constructor_defaults(cls, task):
        return {}

    def hf_head_layers(self):
        """The head's layers by role, for loading a Hugging Face task head:
        `(kind, output Dense, hidden Dense or None, LayerNorm or None)`
        (ModernBERT's transform is the hidden Dense and the LayerNorm), or
        None when this head has no Hugging Face counterpart."""
        return None

    def save_to_preset(self, preset_dir, tokenizer=None, preset_info=None, sequence_length=None):
        """Writes the backbone files, the head (`task_head.safetensors`) and
        a `task` section in `config.json`, published as one unit with a
        checksum manifest (see `BertBackbone.save_to_preset`). With
        `tokenizer`, its vocabulary and settings too, so `from_preset(dir)`
        and the preprocessor load from the directory alone. `preset_info`:
        the description, tokenizer and metadata sections to record
        (default: the backbone's `preset_info`). `sequence_length`: the
        length `from_preset(dir)`'s preprocessor packs to (default: this
        model's preprocessor's, if it has one; else none is recorded and it
        packs to the backbone's maximum)."""
        if sequence_length is None and self.preprocessor is not None:
            sequence_length = getattr(self.preprocessor, "sequence_length", None)
        return preset_loader().save_task_model(
            self,
            preset_dir,
            tokenizer=tokenizer,
            preset_info=preset_info,
            sequence_length=sequence_length,
        )

    # === Serialisation ===

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            **{k: v for k, v in self.task_config().items() if k != "kind"},
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


# Sequence-classification heads: "pooled" is BERT's (Dense on the pooled
# output, or on the first token without a pooler); "electra" and "roberta"
# are ELECTRA's and RoBERTa's (Dense(H) -> GELU or tanh -> Dense on the first
# token), by their activation; "modernbert" and "modernbert_mean" are
# ModernBERT's (its transform, Dense(H) -> GELU -> LayerNorm, on the first
# token or on the mean of the real tokens, then Dense).
CLASSIFIER_HEADS = ("pooled", "electra", "roberta", "modernbert", "modernbert_mean")
_HEAD_ACTIVATIONS = {"electra": "gelu", "roberta": "tanh"}
# The model types (preset metadata) whose head is not BERT's.
_FAMILY_HEADS = {
    "electra": "electra",
    "roberta": "roberta",
    "xlm-roberta": "roberta",
    "modernbert": "modernbert",
}


def _metadata(backbone):
    return (getattr(backbone, "preset_info", None) or {}).get("metadata", {})


def classifier_head_style(backbone):
    """The classification head a backbone's family uses: ELECTRA's for
    ELECTRA checkpoints (and models pre-trained with the electra objective),
    RoBERTa's for RoBERTa and XLM-R ones, ModernBERT's (with the pooling
    its checkpoint records) for ModernBERT ones, else BERT's."""
    metadata = _metadata(backbone)
    head = _FAMILY_HEADS.get(metadata.get("model_type"), "pooled")
    if head == "modernbert" and (metadata.get("hf_config") or {}).get("classifier_pooling") == (
        "mean"
    ):
        return "modernbert_mean"
    return head


def _has_transform(backbone):
    """ModernBERT's tagging and QA heads put its transform before the
    output layer."""
    return _metadata(backbone).get("model_type") == "modernbert"


def _transform(backbone, prefix):
    """ModernBERT's head transform (transformers' ModernBertPredictionHead):
    Dense(H) -> GELU -> LayerNorm, with biases where the backbone has them;
    returns `(dense, layer_norm)`."""
    dense = keras.layers.Dense(
        backbone.hidden_dim,
        activation=get_activation("gelu"),
        use_bias=backbone.use_bias,
        kernel_initializer=kernel_initializer(backbone.initializer_range),
        dtype=backbone.dtype_policy,
        name=f"{prefix}_transform_dense",
    )
    norm = keras.layers.LayerNormalization(
        epsilon=backbone.layer_norm_epsilon,
        center=backbone.use_bias,
        dtype=backbone.dtype_policy,
        name=f"{prefix}_transform_norm",
    )
    return dense, norm


def _head_dense(units, backbone, name):
    # float32: the logits feed a float32 loss and are tiny.
    return keras.layers.Dense(
        units,
        kernel_initializer=kernel_initializer(backbone.initializer_range),
        dtype="float32",
        name=name,
    )


def _dropout(rate, backbone, name):
    return keras.layers.Dropout(rate, dtype=backbone.dtype_policy, name=name)


def _freeze_unused_pooler(backbone):
    """Token-level heads do not use the pooler: keep it out of training (no
    gradients, no optimizer slots); its weights are still saved."""
    if backbone.use_pooler:
        backbone.get_layer("pooler_dense").trainable = False


def _check_dropout(dropout):
    if not 0.0 <= float(dropout) < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}.")
    return float(dropout)


@keras.saving.register_keras_serializable(package="bertzoo")
class BertClassifier(TaskModel):
    """Sequence classification (or regression) on the pooled output.

    Inputs: the backbone's dict (`token_ids`, `segment_ids`, `padding_mask`;
    a `BertPreprocessor` makes it from texts or `(texts_a, texts_b)` pairs).
    Output: float32 logits `(batch, num_classes)`; with `num_classes=1`, a
    score `(batch, 1)` trained with mean squared error. The head is
    `Dropout` + `Dense` on the pooled output (`tanh(Dense([CLS]))`), or on
    the [CLS] vector when the backbone has no pooler (DistilBERT-style);
    for ELECTRA backbones it is ELECTRA's (`head="electra"`): `Dropout` ->
    `Dense(hidden_dim)` -> GELU -> `Dropout` -> `Dense` on the first token;
    for RoBERTa and XLM-R backbones RoBERTa's (`head="roberta"`), the same
    with tanh (transformers' `RobertaClassificationHead`); for ModernBERT
    backbones ModernBERT's: `Dense(hidden_dim)` -> GELU -> `LayerNorm` on
    the first token (`head="modernbert"`) or on the mean of the real tokens
    (`head="modernbert_mean"`, as the checkpoint's `classifier_pooling`
    says), then `Dropout` -> `Dense`; these leave a pooler unused (and
    frozen).

    `compile(optimizer)` builds the loss (mean cross-entropy, or MSE) and the
    `accuracy` metric (classification only); `fit` on `(x, labels)` batches,
    labels int class ids `(batch,)` or float scores.

    Args:
        backbone: a `bertzoo.BertBackbone`.
        num_classes: number of classes; 1 for regression.
        dropout: dropout before the output layer.
        label_names: optional class names (saved with the preset; the
            serving model returns them).
        head: "pooled" (BERT's), "electra", "roberta", "modernbert" or
            "modernbert_mean"; default: the one of the model type the
            backbone's preset records (`electra`; `roberta` or
            `xlm-roberta`; `modernbert`), else "pooled".

    Strings: `from_preset` on a preset with a vocabulary attaches its
    `BertPreprocessor` (`preprocessor`), and then `fit`, `evaluate`,
    `predict` and `predict_proba` also take texts, `(texts_a, texts_b)`
    pairs and `tf.data` datasets of them. `predict` returns logits;
    `predict_proba` the class probabilities (softmax). `fit` compiles with
    `compile()`'s defaults (Adam at 5e-5) when you have not compiled.

    Example:
    >>> classifier = BertClassifier.from_preset("runs/pretrain/preset", num_classes=2)
    >>> classifier.fit(["so good", "so bad"], [1, 0], epochs=3)  # doctest: +SKIP
    >>> classifier.predict_proba(["rather good"])  # doctest: +SKIP
    """

    per_token_outputs = False
    takes_texts = True

    kinds = ("classification", "regression")

    def __init__(self, backbone, num_classes, dropout=0.1, label_names=None, head=None, **kwargs):
        if not isinstance(num_classes, int | np.integer) or num_classes < 1:
            raise ValueError(
                f"num_classes must be an integer >= 1 (1 means regression), got {num_classes!r}."
            )
        num_classes = int(num_classes)
        dropout = _check_dropout(dropout)
        label_names = _label_names(label_names, num_classes, "classes") if num_classes > 1 else None
        head = classifier_head_style(backbone) if head is None else head
        if head not in CLASSIFIER_HEADS:
            raise ValueError(f"head={head!r} is not valid. Valid: {', '.join(CLASSIFIER_HEADS)}.")
        inputs = self._backbone_inputs(backbone)
        features = backbone(inputs)
        dense = norm = None
        if head.startswith("modernbert"):
            _freeze_unused_pooler(backbone)
            dense, norm = _transform(backbone, "classifier")
            sequence = features["sequence_output"]
            if head == "modernbert_mean":
                first = TokenPooling("mean", dtype=backbone.dtype_policy, name="classifier_pool")(
                    sequence, inputs["padding_mask"]
                )
            else:
                first = sequence[:, 0, :]
            pooled = norm(dense(first))
        elif head in _HEAD_ACTIVATIONS:
            # ELECTRA's and RoBERTa's head (no pooler): dropout -> Dense(H)
            # -> GELU / tanh -> dropout -> Dense(classes) on the first token.
            _freeze_unused_pooler(backbone)
            dense = keras.layers.Dense(
                backbone.hidden_dim,
                activation=get_activation(_HEAD_ACTIVATIONS[head]),
                kernel_initializer=kernel_initializer(backbone.initializer_range),
                dtype=backbone.dtype_policy,
                name="classifier_dense",
            )
            first = _dropout(dropout, backbone, "classifier_input_dropout")(
                features["sequence_output"][:, 0, :]
            )
            pooled = dense(first)
        elif backbone.use_pooler:
            pooled = features["pooled_output"]
        else:
            pooled = features["sequence_output"][:, 0, :]
        dropout_layer = _dropout(dropout, backbone, "classifier_dropout")
        output = _head_dense(num_classes, backbone, "classifier_head")
        logits = output(dropout_layer(pooled))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self.backbone = backbone
        self.num_classes = num_classes
        self.dropout = dropout
        self.label_names = label_names
        self.head_style = head
        self.head = output
        self.head_dense = dense
        self.head_norm = norm
        self.head_loaded = False
        self.accuracy = (
            keras.metrics.SparseCategoricalAccuracy(name="accuracy") if num_classes > 1 else None
        )

    @property
    def kind(self):
        return "regression" if self.num_classes == 1 else "classification"

    def task_config(self):
        config = {"kind": self.kind, "num_classes": self.num_classes, "dropout": self.dropout}
        if self.label_names is not None:
            config["label_names"] = list(self.label_names)
        if self.head_style != "pooled":
            config["head"] = self.head_style
        return config

    @classmethod
    def _constructor_defaults(cls, task):
        defaults = {"num_classes": task.get("num_classes"), "head": task.get("head")}
        if "label_names" in task:
            defaults["label_names"] = task["label_names"]
        return {k: v for k, v in defaults.items() if v is not None}

    @classmethod
    def from_preset(cls, preset, num_classes=None, load_weights=True, **kwargs):
        """See `TaskModel.from_preset`. `num_classes` defaults to the class
        count a bertzoo task preset or an HF classifier head records; a
        different count keeps the backbone and starts a new head."""
        with preset_lib.pinned(preset) as preset:
            return cls._from_pinned_preset(preset, num_classes, load_weights, **kwargs)

    @classmethod
    def _from_pinned_preset(cls, preset, num_classes, load_weights, **kwargs):
        if num_classes is not None:
            task = read_task_section(preset)
            if task.get("num_classes") not in (None, num_classes):
                # The head file will not fit: a new head (and no old names).
                kwargs.setdefault("label_names", None)
            kwargs["num_classes"] = num_classes
        elif not read_task_section(preset).get("num_classes"):
            hf_classes = preset_loader().hf_num_classes(preset)
            if hf_classes is None:
                raise ValueError(
                    f"{preset!r} records no classifier head: pass num_classes= (1 for regression)."
                )
            kwargs["num_classes"] = hf_classes
        return super().from_preset(preset, load_weights=load_weights, **kwargs)

    def head_layers(self):
        return [layer for layer in (self.head_dense, self.head_norm, self.head) if layer]

    def hf_head_layers(self):
        if self.head_dense is not None:
            # classifier.dense -> classifier.out_proj, or ModernBERT's
            # head.dense -> head.norm -> classifier
            return "classification", self.head, self.head_dense, self.head_norm
        if not self.backbone.use_pooler:
            return None
        return "classification", self.head, None, None

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits = ops.cast(y_pred, "float32")
        if self.num_classes == 1:
            target = ops.reshape(ops.cast(y, "float32"), (-1, 1))
            per_example = ops.mean(ops.square(logits - target), axis=-1)
        else:
            per_example = keras.losses.sparse_categorical_crossentropy(
                ops.reshape(y, (-1,)), logits, from_logits=True
            )
        loss = weighted_mean(per_example, sample_weight)
        return finish_loss(self, loss)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if self.accuracy is not None:
            self.accuracy.update_state(ops.reshape(y, (-1,)), y_pred, sample_weight)
        return super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)


@keras.saving.register_keras_serializable(package="bertzoo")
class BertTokenClassifier(TaskModel):
    """One label per token (NER, POS tagging): `Dropout` + `Dense` on every
    position of the sequence output (on a ModernBERT backbone, after
    ModernBERT's transform: `Dense(hidden_dim)` -> GELU -> `LayerNorm`).

    Output: float32 logits `(batch, sequence, num_labels)`. Labels for
    `fit` are int ids `(batch, sequence)`, with -100 (`IGNORE_LABEL`) where
    a position is not scored: `bertzoo.tasks.tagging.features.tagging_features` labels
    each word at its first sub-token and ignores the rest. The loss is the
    mean cross-entropy over scored positions; the metric `token_accuracy`
    counts scored positions only.

    Args:
        backbone: a `bertzoo.BertBackbone`.
        num_labels: number of tags (e.g. len(["O", "B-PER", "I-PER"])).
        dropout: dropout before the output layer.
        label_names: optional tag names, saved with the preset.
    """

    per_token_outputs = True

    kinds = ("tagging",)
    kind = "tagging"
    texts_hint = (
        "word-level labels need word-to-token alignment; build inputs with "
        "bertzoo.tasks.tagging.features.tagging_features, or fine-tune with "
        "recipes/finetune.py --task tagging."
    )

    def __init__(self, backbone, num_labels, dropout=0.1, label_names=None, **kwargs):
        if not isinstance(num_labels, int | np.integer) or num_labels < 2:
            raise ValueError(f"num_labels must be an integer >= 2, got {num_labels!r}.")
        num_labels = int(num_labels)
        dropout = _check_dropout(dropout)
        label_names = _label_names(label_names, num_labels, "labels")
        _freeze_unused_pooler(backbone)
        inputs = self._backbone_inputs(backbone)
        sequence = backbone(inputs)["sequence_output"]
        dense = norm = None
        if _has_transform(backbone):
            dense, norm = _transform(backbone, "tagger")
            sequence = norm(dense(sequence))
        dropout_layer = _dropout(dropout, backbone, "tagger_dropout")
        head = _head_dense(num_labels, backbone, "tagger_head")
        logits = head(dropout_layer(sequence))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self.backbone = backbone
        self.num_labels = num_labels
        self.dropout = dropout
        self.label_names = label_names
        self.head = head
        self.head_dense = dense
        self.head_norm = norm
        self.head_loaded = False
        self.token_accuracy = keras.metrics.SparseCategoricalAccuracy(name="token_accuracy")

    def task_config(self):
        config = {"kind": self.kind, "num_labels": self.num_labels, "dropout": self.dropout}
        if self.label_names is not None:
            config["label_names"] = list(self.label_names)
        return config

    @classmethod
    def _constructor_defaults(cls, task):
        return {k: task[k] for k in ("num_labels", "label_names") if k in task}

    @classmethod
    def from_preset(cls, preset, num_labels=None, load_weights=True, **kwargs):
        """See `TaskModel.from_preset`; `num_labels` defaults to the tag
        count the directory records."""
        with preset_lib.pinned(preset) as preset:
            return cls._from_pinned_preset(preset, num_labels, load_weights, **kwargs)

    @classmethod
    def _from_pinned_preset(cls, preset, num_labels, load_weights, **kwargs):
        task = read_task_section(preset)
        if num_labels is not None:
            if task.get("kind") == "tagging" and task.get("num_labels") != num_labels:
                kwargs.setdefault("label_names", None)
            kwargs["num_labels"] = num_labels
        elif task.get("kind") != "tagging":
            raise ValueError(f"{preset!r} records no token-classification head: pass num_labels=.")
        return super().from_preset(preset, load_weights=load_weights, **kwargs)

    def head_layers(self):
        return [layer for layer in (self.head_dense, self.head_norm, self.head) if layer]

    def hf_head_layers(self):
        if self.backbone.use_pooler:
            return None
        return "tagging", self.head, self.head_dense, self.head_norm

    @staticmethod
    def _scored(y):
        y = ops.cast(y, "int32")
        weights = ops.cast(ops.not_equal(y, IGNORE_LABEL), "float32")
        return ops.maximum(y, 0), weights

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        labels, weights = self._scored(y)
        if sample_weight is not None:
            weights = weights * ops.cast(ops.reshape(sample_weight, (-1, 1)), "float32")
        return finish_loss(self, masked_lm_loss(labels, y_pred, weights))

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        labels, weights = self._scored(y)
        self.token_accuracy.update_state(labels, y_pred, weights)
        return super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)


@keras.saving.register_keras_serializable(package="bertzoo")
class BertSpanQA(TaskModel):
    """Extractive question answering: a `Dense(2)` on the sequence output
    gives start and end logits per token (on a ModernBERT backbone, after
    ModernBERT's transform: `Dense(hidden_dim)` -> GELU -> `LayerNorm`).

    Outputs `{"start_logits", "end_logits"}`, float32 `(batch, sequence)`,
    with padding positions set to -1e9 (so they never win and the result
    does not depend on how much padding there is). Targets for `fit` are
    `{"start_positions", "end_positions"}` token indices (0, the [CLS]
    position, for "no answer in this window"); the loss is the mean of the
    start and end cross-entropies, the metric `span_accuracy` the share of
    windows whose start and end are both exactly right.
    `bertzoo.tasks.qa.features` builds windows and labels and turns logits back into
    answer text.

    Args:
        backbone: a `bertzoo.BertBackbone`.
    """

    per_token_outputs = True

    kinds = ("qa",)
    kind = "qa"
    texts_hint = (
        "questions and contexts are split into windows with answer spans; build "
        "inputs with bertzoo.tasks.qa.features.encode_qa, or fine-tune with "
        "recipes/finetune.py --task qa."
    )

    def __init__(self, backbone, **kwargs):
        _freeze_unused_pooler(backbone)
        inputs = self._backbone_inputs(backbone)
        sequence = backbone(inputs)["sequence_output"]
        dense = norm = None
        if _has_transform(backbone):
            dense, norm = _transform(backbone, "span")
            sequence = norm(dense(sequence))
        head = _head_dense(2, backbone, "span_head")
        logits = head(sequence)  # (B, S, 2)
        padding = ops.cast(inputs["padding_mask"], "bool")
        start = ops.where(padding, logits[..., 0], -1e9)
        end = ops.where(padding, logits[..., 1], -1e9)
        outputs = {"start_logits": start, "end_logits": end}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone = backbone
        self.head = head
        self.head_dense = dense
        self.head_norm = norm
        self.head_loaded = False
        self.span_accuracy = keras.metrics.Mean(name="span_accuracy")

    def task_config(self):
        return {"kind": self.kind}

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """See `TaskModel.from_preset`."""
        return super().from_preset(preset, load_weights=load_weights, **kwargs)

    def head_layers(self):
        return [layer for layer in (self.head_dense, self.head_norm, self.head) if layer]

    def hf_head_layers(self):
        return "qa", self.head, self.head_dense, self.head_norm

    @staticmethod
    def _targets(y):
        if isinstance(y, dict):
            return y["start_positions"], y["end_positions"]
        start, end = y
        return start, end

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        start, end = self._targets(y)
        losses = [
            keras.losses.sparse_categorical_crossentropy(
                ops.reshape(t, (-1,)), ops.cast(y_pred[k], "float32"), from_logits=True
            )
            for t, k in ((start, "start_logits"), (end, "end_logits"))
        ]
        per_example = (losses[0] + losses[1]) / 2.0
        return finish_loss(self, weighted_mean(per_example, sample_weight))

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        start, end = self._targets(y)
        hit = ops.logical_and(
            ops.equal(
                ops.argmax(y_pred["start_logits"], -1), ops.cast(ops.reshape(start, (-1,)), "int32")
            ),
            ops.equal(
                ops.argmax(y_pred["end_logits"], -1), ops.cast(ops.reshape(end, (-1,)), "int32")
            ),
        )
        self.span_accuracy.update_state(ops.cast(hit, "float32"), sample_weight)
        return super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)


# The model class of each task kind a task preset can record. The kinds a run
# accepts are the registered `bertzoo.tasks` kinds; each names its model class.
def task_model_from_preset(preset, **kwargs):
    """The task model a bertzoo task preset directory records (its `task`
    section's kind), with its head loaded."""
    with preset_lib.pinned(preset) as preset:
        task = read_task_section(preset)
        kind = task.get("kind")
        if kind not in TASK_MODELS:
            raise preset_lib.PresetError(
                f"{preset} is not a fine-tuned task preset (its config.json has no 'task' "
                f"section with a kind in {', '.join(TASK_MODELS)}); load it with "
                "BertClassifier/BertTokenClassifier/BertSpanQA.from_preset and the head you want."
            )
        return TASK_MODELS[kind].from_preset(preset, **kwargs)
