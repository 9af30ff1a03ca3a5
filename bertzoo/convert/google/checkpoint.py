"""Reading a Google TF1 checkpoint of any family: its files, config,
vocabulary and casing, and its tensors split between the models it holds
(`read_google_checkpoint`). What differs by family is in its
`GoogleFamily` (`bertzoo.convert.google.families`)."""

from pathlib import Path

from bertzoo import presets as preset_lib
from bertzoo.convert.common import CheckpointError, read_json_object
from bertzoo.convert.google.families import detect_model_type, family
from bertzoo.convert.google.files import (
    check_vocabulary,
    infer_lowercase,
    pick_checkpoint,
    pick_file,
)
from bertzoo.convert.google.spec import GoogleCheckpoint, Reading, backbone_arguments, is_ignored


def _open(source, checkpoint, model_type):
    """The `Reading` of the checkpoint `source` or `checkpoint` names, its
    family detected from the tensor names (and checked against
    `model_type`)."""
    import tensorflow as tf

    prefix = str(checkpoint) if checkpoint else pick_checkpoint(source)
    if not Path(f"{prefix}.index").is_file():
        raise CheckpointError(f"No TF1 checkpoint at {prefix} (no {prefix}.index).")
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = {k: tuple(v) for k, v in reader.get_variable_to_shape_map().items()}
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(f"Cannot read the TF1 checkpoint {prefix}: {e}") from e
    detected = detect_model_type(shapes, prefix)
    if model_type is not None and model_type != detected:
        raise CheckpointError(
            f"model_type={model_type!r} was asked for, but {prefix} holds a "
            f"{detected.upper()} checkpoint (its tensor names)."
        )
    return Reading(prefix, reader, shapes, Path(prefix).parent, family(detected), None)


def _read_config(reading, config_file):
    spec = reading.family
    path = (
        Path(config_file)
        if config_file
        else pick_file(
            reading.directory,
            spec.config_files,
            "model config",
            "config_file",
            required=spec.config_required,
            exclude=spec.config_exclude,
        )
    )
    reading.config_path = path
    reading.config = read_json_object(path) if path is not None else {}
    reading.size_source = path if path is not None else f"the checkpoint {reading.prefix}"


def _pick_vocabulary(reading, vocab_file):
    """(tokenizer kind, vocabulary file)."""
    kind, patterns, what = reading.family.vocabulary
    if not vocab_file:
        return kind, pick_file(reading.directory, patterns, what, "vocab_file")
    vocab = Path(vocab_file)
    if not vocab.is_file():
        raise CheckpointError(f"The vocabulary {vocab} does not exist.")
    return ("wordpiece" if vocab.suffix == ".txt" else "sentencepiece"), vocab


def _lowercase(reading, source, lowercase):
    """Whether the tokenizer lowercases: as given, else the config's
    `do_lower_case` (ELECTRA's pre-training hparams), else True for ALBERT
    (every released model lowercases), else the folder names from the
    checkpoint's up to `source`."""
    if lowercase is None and isinstance(reading.config.get("do_lower_case"), bool):
        lowercase = reading.config["do_lower_case"]
    if lowercase is not None:
        return lowercase
    if reading.family.model_type == "albert":
        return True
    dirs = [reading.directory.resolve()]
    if source is not None and Path(source).is_dir():
        top = Path(source).resolve()
        while dirs[-1] != top and top in dirs[-1].parents:
            dirs.append(dirs[-1].parent)
    lowercase = infer_lowercase(*dirs)
    if lowercase is None:
        electra = reading.family.model_type == "electra"
        raise CheckpointError(
            f"Cannot tell whether {reading.prefix} is a cased or an uncased model (its "
            "directory name says neither): pass lowercase=True or False "
            "(--lowercase / --cased on the command line)"
            + (
                "; Google's released ELECTRA models are uncased, KoELECTRA is cased."
                if electra
                else "."
            )
        )
    return lowercase


def _split_tensors(reading):
    """The tensors and head shapes of the encoder converted at the top
    level, and of a second model (ELECTRA's generator: `None` when there is
    none). Everything the second model does not read alone is the top-level
    encoder's (and reported unused there when it is not one of its
    tensors)."""
    main = ({}, {}, reading.family.head_scopes)
    parts = reading.family.generator_parts(reading.shapes)
    second, reads, only = None, (), ()
    if parts is not None:
        reads, only, head_scopes = parts
        second = ({}, {}, head_scopes)
    for name, shape in reading.shapes.items():
        if is_ignored(name):
            continue
        targets = [] if name.startswith(only) else [main]
        if second is not None and name.startswith(reads):
            targets.append(second)
        value = None
        for tensors, head_shapes, head_scopes in targets:
            if name.startswith(head_scopes):
                head_shapes[name] = shape
            else:
                value = reading.reader.get_tensor(name) if value is None else value
                tensors[name] = value
    return main[:2], (second[:2] if second is not None else None)


def _preset_info(reading, kind, lowercase, metadata):
    tokenizer_info = {
        "kind": kind,
        "lowercase": bool(lowercase),
        # BERT (and ELECTRA) strip accents exactly when they lowercase;
        # ALBERT's preprocess_text always strips them (NFKD, drop combining
        # marks).
        "strip_accents": bool(lowercase) if kind == "wordpiece" else True,
        # google-research/bert's own tokenization.py (ELECTRA ships a copy),
        # as the checkpoint was trained with.
        **({"reference": "google"} if kind == "wordpiece" else {}),
    }

    def preset_info(what):
        return {
            "description": (
                f"{what} converted from the Google TF1 checkpoint {Path(reading.prefix).name} "
                f"in {reading.directory}."
            ),
            "tokenizer": tokenizer_info,
            "metadata": metadata,
        }

    return preset_info


def _metadata(reading, metadata):
    info = {
        "source_checkpoint": str(reading.prefix),
        # The architecture alone reads as BERT: no pooler, ELECTRA's heads.
        **({"model_type": "electra"} if reading.family.model_type == "electra" else {}),
        **(metadata or {}),
    }
    preset_lib.validate_preset({"backbone": {}, "metadata": info}, "metadata")
    return info


def read_google_checkpoint(
    source,
    model_type=None,
    lowercase=None,
    *,
    checkpoint=None,
    config_file=None,
    vocab_file=None,
    metadata=None,
):
    """Reads and checks a Google TF1 BERT, ALBERT or ELECTRA checkpoint, its
    config and vocabulary (arguments as for
    `bertzoo.convert.convert_google_checkpoint`). Returns a
    `GoogleCheckpoint` (an ELECTRA checkpoint's generator in its
    `generator`); `load_google_weights` fills a backbone from it and
    `save_google_preset` writes the preset directory."""
    if model_type is not None:
        family(model_type)  # a valid name
    if source is None and not (checkpoint and vocab_file):
        raise CheckpointError(
            "Pass a source directory, or checkpoint= and vocab_file= (with config_file= "
            "unless the model config is beside the checkpoint)."
        )
    reading = _open(source, checkpoint, model_type)
    spec = reading.family
    info_metadata = _metadata(reading, metadata)
    _read_config(reading, config_file)
    kind, reading.vocabulary = _pick_vocabulary(reading, vocab_file)
    if spec.read_sizes is not None:
        backbone_config = spec.read_sizes(reading)
    else:
        backbone_config = backbone_arguments(
            reading.config, spec, reading.config_path, reading.shapes
        )
    check_vocabulary(
        reading.vocabulary, kind, backbone_config["vocabulary_size"], reading.size_source
    )
    lowercase = _lowercase(reading, source, lowercase)
    (tensors, head_shapes), second = _split_tensors(reading)
    reading.preset_info = _preset_info(reading, kind, lowercase, info_metadata)
    generator = spec.read_generator(reading, *second) if second is not None else None
    electra = spec.model_type == "electra"
    return GoogleCheckpoint(
        prefix=str(reading.prefix),
        model_type=spec.model_type,
        config_path=reading.config_path,
        backbone_config=backbone_config,
        tensors=tensors,
        head_shapes=head_shapes,
        vocabulary=Path(reading.vocabulary),
        preset_info=reading.preset_info(
            "ELECTRA discriminator" if electra else spec.model_type.upper()
        ),
        reader=reading.reader,
        scope=spec.scope,
        embeddings_scope=spec.scope,
        generator=generator,
    )
