"""Downloads of Google's original BERT and ALBERT checkpoint archives.

The archives are the ones the built-in presets' `metadata.checkpoint_url`
names (or any https:// or file:// URL); nothing here downloads unless asked
to. Conversion of the extracted checkpoint: `bertzoo.convert.google`.
"""

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from bertzoo import presets as preset_lib
from bertzoo.convert.common import CheckpointError, read_json_object
from bertzoo.errors import OutputError
from bertzoo.io.jsonfile import load_json
from bertzoo.io.publish import atomic_write_text

logger = logging.getLogger(__name__)

# Google publishes no checksums for its BERT or ALBERT archives. For the four
# 2018_10_18 English BERT archives, NVIDIA's DeepLearningExamples records the
# SHA-256 of the files inside them (PyTorch/LanguageModeling/BERT/data/
# GooglePretrainedWeightDownloader.py); they are checked after extraction.
# For every other archive no checksum is known to us: the computed SHA-256 is
# logged and recorded, and a checksum the user passes is verified.
_RECORDED_MEMBER_SHA256 = {
    "uncased_L-12_H-768_A-12.zip": {
        "bert_config.json": "7b4e5f53efbd058c67cda0aacfafb340113ea1b5797d9ce6ee411704ba21fcbc",
        "bert_model.ckpt.data-00000-of-00001": "58580dc5e0bf0ae0d2efd51d0e8272b2f808857f0a43a88aaf7549da6d7a8a84",
        "bert_model.ckpt.index": "04c1323086e2f1c5b7c0759d8d3e484afbb0ab45f51793daab9f647113a0117b",
        "bert_model.ckpt.meta": "dd5682170a10c3ea0280c2e9b9a45fee894eb62da649bbdea37b38b0ded5f60e",
        "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    },
    "uncased_L-24_H-1024_A-16.zip": {
        "bert_config.json": "bfa42236d269e2aeb3a6d30412a33d15dbe8ea597e2b01dc9518c63cc6efafcb",
        "bert_model.ckpt.data-00000-of-00001": "bc6b3363e3be458c99ecf64b7f472d2b7c67534fd8f564c0556a678f90f4eea1",
        "bert_model.ckpt.index": "68b52f2205ffc64dc627d1120cf399c1ef1cbc35ea5021d1afc889ffe2ce2093",
        "bert_model.ckpt.meta": "6fcce8ff7628f229a885a593625e3d5ff9687542d5ef128d9beb1b0c05edc4a1",
        "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    },
    "cased_L-12_H-768_A-12.zip": {
        "bert_config.json": "f11dfb757bea16339a33e1bf327b0aade6e57fd9c29dc6b84f7ddb20682f48bc",
        "bert_model.ckpt.data-00000-of-00001": "734d5a1b68bf98d4e9cb6b6692725d00842a1937af73902e51776905d8f760ea",
        "bert_model.ckpt.index": "517d6ef5c41fc2ca1f595276d6fccf5521810d57f5a74e32616151557790f7b1",
        "bert_model.ckpt.meta": "5f8a9771ff25dadd61582abb4e3a748215a10a6b55947cbb66d0f0ba1694be98",
        "vocab.txt": "eeaa9875b23b04b4c54ef759d03db9d1ba1554838f8fb26c5d96fa551df93d02",
    },
    "cased_L-24_H-1024_A-16.zip": {
        "bert_config.json": "7adb2125c8225da495656c982fd1c5f64ba8f20ad020838571a3f8a954c2df57",
        "bert_model.ckpt.data-00000-of-00001": "6ff33640f40d472f7a16af0c17b1179ca9dcc0373155fb05335b6a4dd1657ef0",
        "bert_model.ckpt.index": "ef42a53f577fbe07381f4161b13c7cab4f4fc3b167cec6a9ae382c53d18049cf",
        "bert_model.ckpt.meta": "d2ddff3ed33b80091eac95171e94149736ea74eb645e575d942ec4a5e01a40a1",
        "vocab.txt": "eeaa9875b23b04b4c54ef759d03db9d1ba1554838f8fb26c5d96fa551df93d02",
    },
}

_DOWNLOAD_RECORD = ".bertzoo-download.json"
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")
_CHUNK = 1 << 20


def google_checkpoints():
    """Built-in presets that name an official Google archive: preset name ->
    `{"url", "lowercase", "license"}`."""
    out = {}
    for name, path in preset_lib.builtin_presets().items():
        doc = load_json(path)
        url = doc.get("metadata", {}).get("checkpoint_url")
        if url:
            out[name] = {
                "url": url,
                "lowercase": doc.get("tokenizer", {}).get("lowercase"),
                "license": doc.get("metadata", {}).get("license"),
            }
    return out


def _resolve_download(name):
    known = google_checkpoints()
    if name in known:
        return known[name]
    scheme = urllib.parse.urlparse(str(name)).scheme
    if scheme in ("https", "http", "file"):
        return {"url": str(name), "lowercase": None, "license": None}
    if name in preset_lib.builtin_presets():
        raise CheckpointError(
            f"The preset {name!r} has no official Google archive (no "
            f"metadata.checkpoint_url). Presets that have one: {', '.join(sorted(known))}."
        )
    raise CheckpointError(
        f"Unknown Google checkpoint {name!r}: pass a built-in preset name with a "
        f"checkpoint_url ({', '.join(sorted(known))}) or an https:// or file:// URL."
    )


def _archive_name(url):
    filename = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).name
    for suffix in _ARCHIVE_SUFFIXES:
        if filename.endswith(suffix) and len(filename) > len(suffix):
            return filename, filename[: -len(suffix)]
    raise CheckpointError(f"{url} does not name a .zip, .tar.gz or .tgz archive.")


def _sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(url, dest):
    """Streams `url` to `dest`; returns its SHA-256."""
    digest = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(url) as response, open(dest, "wb") as f:
            for block in iter(lambda: response.read(_CHUNK), b""):
                f.write(block)
                digest.update(block)
                size += len(block)
    except OSError as e:  # URLError is an OSError
        raise CheckpointError(f"Cannot download {url}: {e}") from e
    logger.info("Downloaded %s: %s bytes, sha256 %s", url, f"{size:,}", digest.hexdigest())
    return digest.hexdigest()


def _safe_extract(archive, dest):
    """Extracts without letting member names escape `dest`."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                parts = Path(member).parts
                if Path(member).is_absolute() or ".." in parts:
                    raise CheckpointError(f"{archive}: unsafe member path {member!r}.")
            zf.extractall(dest)
        return
    try:
        with tarfile.open(archive) as tf_archive:
            if hasattr(tarfile, "data_filter"):
                tf_archive.extractall(dest, filter="data")
            else:  # Python < 3.11.4: check by hand
                for member in tf_archive.getmembers():
                    parts = Path(member.name).parts
                    if (
                        Path(member.name).is_absolute()
                        or ".." in parts
                        or not (member.isfile() or member.isdir())
                    ):
                        raise CheckpointError(f"{archive}: unsafe member {member.name!r}.")
                tf_archive.extractall(dest)
    except tarfile.TarError as e:
        raise CheckpointError(f"{archive} is not a readable zip or tar archive: {e}") from e


def _check_recorded_members(archive_name, directory):
    recorded = _RECORDED_MEMBER_SHA256.get(archive_name)
    if not recorded:
        return False
    files = {p.name: p for p in Path(directory).rglob("*") if p.is_file()}
    for member, expected in recorded.items():
        if member not in files:
            raise CheckpointError(f"{archive_name}: the archive has no {member}.")
        actual = _sha256_of(files[member])
        if actual != expected:
            raise CheckpointError(
                f"{archive_name}: {member} has sha256 {actual}, but {expected} is "
                "recorded for it (NVIDIA DeepLearningExamples' "
                "GooglePretrainedWeightDownloader). The download is corrupt or the "
                "archive changed upstream; pass check_recorded=False only if you "
                "have verified it another way."
            )
    return True


@dataclasses.dataclass(frozen=True)
class DownloadedCheckpoint:
    """An extracted Google checkpoint archive.

    Attributes:
        directory: the extracted checkpoint directory.
        lowercase: the casing the built-in preset records, else None.
        metadata: preset metadata naming the archive (`checkpoint_url`,
            `source_checkpoint` with its SHA-256, and `license` if known).
    """

    directory: Path
    lowercase: bool | None
    metadata: dict


@dataclasses.dataclass(frozen=True)
class _Archive:
    """One archive to download: its URL, file name, the stem it is extracted
    under, the cache directory and the SHA-256 expected (None: not pinned)."""

    url: str
    name: str
    stem: str
    cache_dir: Path
    expected: str | None

    @property
    def final(self):
        """Where the archive is extracted."""
        return self.cache_dir / self.stem


def _reuse_download(archive):
    """The SHA-256 recorded for an earlier extraction of `archive`, after
    checking it against the one expected."""
    final = archive.final
    record = read_json_object(final / _DOWNLOAD_RECORD)
    if archive.expected and record.get("sha256") != archive.expected:
        raise CheckpointError(
            f"{final} was extracted from an archive with sha256 {record.get('sha256')}, "
            f"not the expected {archive.expected}. Delete {final} to download it again."
        )
    logger.info("Using %s, downloaded earlier from %s.", final, record.get("url"))
    return record.get("sha256")


def _fetch_verified(archive, path):
    """Downloads `archive` to `path`; its SHA-256, checked against the one
    expected (a warning when none is)."""
    actual = _fetch(archive.url, path)
    if archive.expected and actual != archive.expected:
        raise CheckpointError(
            f"Checksum mismatch for {archive.url}: sha256 {actual}, expected "
            f"{archive.expected}. The download is corrupt or not the archive you meant."
        )
    if not archive.expected:
        logger.warning(
            "No sha256 was given for %s, and no published checksum is known for "
            "the archive itself; pass sha256=%s to pin this one.",
            archive.name,
            actual,
        )
    return actual


def _download(archive, check_recorded):
    """Downloads, verifies and extracts `archive` into a temporary folder
    renamed into place when complete (with its download record); returns
    the archive's SHA-256. Nothing is left behind on failure."""
    fd, tmp_archive = tempfile.mkstemp(
        prefix=f".{archive.name}.", suffix=".part", dir=archive.cache_dir
    )
    os.close(fd)
    tmp_dir = None
    try:
        actual = _fetch_verified(archive, tmp_archive)
        tmp_dir = tempfile.mkdtemp(
            prefix=f".{archive.stem}.", suffix=".extract", dir=archive.cache_dir
        )
        _safe_extract(tmp_archive, tmp_dir)
        if check_recorded and _check_recorded_members(archive.name, tmp_dir):
            logger.info("The files in %s match their recorded sha256 values.", archive.name)
        atomic_write_text(
            Path(tmp_dir) / _DOWNLOAD_RECORD,
            json.dumps({"url": archive.url, "sha256": actual}, indent=2) + "\n",
        )
        os.replace(tmp_dir, archive.final)
        tmp_dir = None
    finally:
        if os.path.exists(tmp_archive):
            os.unlink(tmp_archive)
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return actual


def download_google_archive(name, cache_dir, sha256=None, check_recorded=True):
    """Downloads, verifies and extracts an official Google BERT/ALBERT archive.

    The archive is streamed to a temporary file in `cache_dir`, its SHA-256
    computed, logged and compared with `sha256` when given, then extracted
    into a temporary folder that is renamed into place (`cache_dir/<archive
    name>`) only when complete. For the four 2018_10_18 English BERT archives
    the extracted files are also checked against SHA-256 values recorded by
    NVIDIA's DeepLearningExamples (Google publishes none); for the others no
    published checksum exists, so pass `sha256` to pin the archive you expect.
    A later call reuses the extracted folder (and checks `sha256` against the
    one recorded at download).

    Args:
        name: a built-in preset name whose metadata has a `checkpoint_url`
            (e.g. "bert_base", "albert_base"), or an https:// or file:// URL.
        cache_dir: where archives are downloaded and extracted.
        sha256: expected SHA-256 (hex) of the archive.
        check_recorded: check the extracted files against recorded checksums
            where some are known.

    Returns a `DownloadedCheckpoint`.
    """
    info = _resolve_download(name)
    url = info["url"]
    archive_name, stem = _archive_name(url)
    expected = sha256.lower().strip() if sha256 else None
    archive = _Archive(url, archive_name, stem, Path(cache_dir), expected)
    archive.cache_dir.mkdir(parents=True, exist_ok=True)
    final = archive.final
    if (final / _DOWNLOAD_RECORD).is_file():
        actual = _reuse_download(archive)
    elif final.exists():
        # bertzoo renames a complete extraction (its record inside) into
        # place in one step: this folder is not one of its downloads.
        raise OutputError(
            f"{final} exists but holds no {_DOWNLOAD_RECORD}, so bertzoo did not download it "
            "there and will not replace it; move it or use another cache directory."
        )
    else:
        actual = _download(archive, check_recorded)
    metadata = {"checkpoint_url": url, "source_checkpoint": f"{url} (sha256 {actual})"}
    if info["license"]:
        metadata["license"] = info["license"]
    return DownloadedCheckpoint(final, info["lowercase"], metadata)
