"""Finding a Google TF1 checkpoint's files (checkpoint prefix, model
config, vocabulary), checking the vocabulary's size and telling the casing
from the folder's name: the same for every family."""

import logging
import re
from pathlib import Path

from bertzoo.convert.common import CheckpointError

logger = logging.getLogger(__name__)


def _checkpoint_prefixes(directory):
    return sorted(str(p)[: -len(".index")] for p in Path(directory).glob("*.index"))


def _search_dirs(source):
    """`source` and, for archives that extract into one folder, its only
    subdirectory."""
    source = Path(source)
    dirs = [source]
    subdirs = [p for p in source.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))]
    if not _checkpoint_prefixes(source) and len(subdirs) == 1:
        dirs.append(subdirs[0])
    return dirs


def pick_checkpoint(source):
    source = Path(source)
    if not source.is_dir():
        if Path(f"{source}.index").is_file():
            return str(source)  # a checkpoint prefix
        raise CheckpointError(
            f"{source} is neither a directory nor a checkpoint prefix (no {source}.index)."
        )
    for directory in _search_dirs(source):
        prefixes = _checkpoint_prefixes(directory)
        if len(prefixes) == 1:
            return prefixes[0]
        if len(prefixes) > 1:
            import tensorflow as tf

            latest = tf.train.latest_checkpoint(str(directory))
            by_path = {Path(p).resolve(): p for p in prefixes}
            if latest and Path(latest).resolve() in by_path:
                return by_path[Path(latest).resolve()]
            raise CheckpointError(
                f"{directory} holds several checkpoints ({', '.join(Path(p).name for p in prefixes)}) "
                "and no 'checkpoint' file says which is the latest: pass checkpoint=PREFIX."
            )
    raise CheckpointError(
        f"{source} holds no TF1 checkpoint: no '<prefix>.index' file (such as "
        "bert_model.ckpt.index or model.ckpt-best.index) was found in it or in its "
        "only subdirectory."
    )


def pick_file(directory, patterns, what, keyword, required=True, exclude=None):
    """The one file of `directory` matching the first of `patterns` that
    matches any (names `exclude` searches skipped); None when none matches
    and the file is not `required`."""
    found = []
    for pattern in patterns:
        found = sorted(
            p
            for p in Path(directory).glob(pattern)
            if p.is_file() and not (exclude and exclude.search(p.name))
        )
        if found:
            break
    if len(found) == 1:
        return found[0]
    if not found:
        if not required:
            return None
        raise CheckpointError(
            f"{directory} has no {what} ({' or '.join(patterns)}): pass {keyword}=PATH."
        )
    hint = f"pass {keyword}=PATH" if keyword else "keep one of them beside the checkpoint"
    raise CheckpointError(
        f"{directory} has several candidate {what}s ({', '.join(p.name for p in found)}): {hint}."
    )


def _count_lines(path):
    try:
        with open(path, encoding="utf-8") as f:
            return sum(1 for _ in f)
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"Cannot read the vocabulary {path}: {e}") from e


def _sentencepiece_size(path):
    """Pieces in a SentencePiece model: counted from the `.vocab` text file
    the ALBERT archives ship beside it, else with the sentencepiece package
    when it is installed; None when neither is available."""
    listing = Path(path).with_suffix(".vocab")
    if listing.is_file():
        return _count_lines(listing), listing
    try:
        import sentencepiece
    except ImportError:
        return None, None
    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    except Exception as e:  # sentencepiece raises OSError/RuntimeError
        raise CheckpointError(f"{path} is not a readable SentencePiece model: {e}") from e
    return processor.get_piece_size(), path


def check_vocabulary(vocab, kind, vocabulary_size, config_path):
    if kind == "wordpiece":
        size, counted = _count_lines(vocab), vocab
    else:
        size, counted = _sentencepiece_size(vocab)
        if size is None:
            logger.warning(
                "Not checking the size of %s: no %s beside it and the sentencepiece "
                "package is not installed.",
                vocab,
                Path(vocab).with_suffix(".vocab").name,
            )
            return
    if size != vocabulary_size:
        raise CheckpointError(
            f"The vocabulary {counted} has {size} entries but {config_path} says "
            f"vocab_size={vocabulary_size}: they come from different models."
        )


_LOWERCASED_NAMES = re.compile(r"(^|[^a-z])(uncased|multilingual_l-|chinese_l-)")
_CASED_NAMES = re.compile(r"(^|[^a-z])cased")


def infer_lowercase(*paths):
    """True for "uncased" directory names, False for "cased", None if no name
    says. The reference code's own check (`validate_case_matches_checkpoint`)
    also counts the original multilingual and Chinese models as lowercased."""
    for path in paths:
        name = Path(path).resolve().name.lower()
        if _LOWERCASED_NAMES.search(name):
            return True
        if _CASED_NAMES.search(name):
            return False
    return None
