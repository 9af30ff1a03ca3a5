"""Downloads of Google checkpoint archives (offline: file:// URLs and a
patched opener): verified, extracted and converted
(`bertzoo.convert.download`, `bertzoo.convert.loader`)."""

import io
import json
import logging
import tarfile
import urllib.request
import zipfile

import pytest

from bertzoo.convert import download
from bertzoo.convert.common import CheckpointError
from bertzoo.convert.download import google_checkpoints
from bertzoo.convert.loader import download_google_checkpoint
from tests.convert import test_google as google_tests

# Download, checksum and archive handling: files only.
pytestmark = pytest.mark.backend_independent

# The checkpoints written for the conversion tests (module-scoped fixtures).
bert_dir = google_tests.bert_dir
albert_dir = google_tests.albert_dir
_zip_dir, _sha256, _max_errors = (
    google_tests._zip_dir,
    google_tests._sha256,
    google_tests._max_errors,
)
BERT_CONFIG, ALBERT_CONFIG = google_tests.BERT_CONFIG, google_tests.ALBERT_CONFIG
TOLERANCE = google_tests.TOLERANCE


def test_download_zip_verify_extract_convert(bert_dir, tmp_path, caplog, monkeypatch):
    source, arrays = bert_dir
    archive = _zip_dir(source, tmp_path / "uncased_L-2_H-20_A-4.zip")
    cache = tmp_path / "cache"
    with caplog.at_level(logging.INFO, logger="bertzoo.convert.download"):
        out = download_google_checkpoint(archive.as_uri(), cache, output_dir=tmp_path / "preset")
    logged = caplog.text
    assert _sha256(archive) in logged and "no published checksum is known" in logged
    _, errors = _max_errors(out, arrays, BERT_CONFIG, albert=False)
    assert max(errors) <= TOLERANCE
    doc = json.loads((out / "config.json").read_text())
    assert doc["metadata"]["checkpoint_url"] == archive.as_uri()
    assert _sha256(archive) in doc["metadata"]["source_checkpoint"]
    assert doc["tokenizer"]["lowercase"] is True  # "uncased" in the archive name
    extracted = cache / "uncased_L-2_H-20_A-4"
    assert sorted(p.name for p in cache.iterdir()) == ["uncased_L-2_H-20_A-4"]  # no temp files
    record = json.loads((extracted / ".bertzoo-download.json").read_text())
    assert record == {"url": archive.as_uri(), "sha256": _sha256(archive)}

    # A second call reuses the extraction (no network), and checks a given
    # checksum against the recorded one.
    def no_network(*args, **kwargs):
        raise AssertionError("downloaded again")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    assert download_google_checkpoint(archive.as_uri(), cache, sha256=_sha256(archive)) == extracted
    with pytest.raises(CheckpointError, match="not the expected 0000"):
        download_google_checkpoint(archive.as_uri(), cache, sha256="0" * 64)


def test_download_tar_gz_with_expected_checksum(albert_dir, tmp_path):
    source, arrays = albert_dir
    archive = tmp_path / "albert_tiny_v2.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="albert_tiny")
    out = download_google_checkpoint(
        archive.as_uri(),
        tmp_path / "cache",
        output_dir=tmp_path / "preset",
        sha256=_sha256(archive).upper(),
    )
    _, errors = _max_errors(out, arrays, ALBERT_CONFIG, albert=True)
    assert max(errors) <= TOLERANCE


def test_download_checksum_mismatch_leaves_nothing(bert_dir, tmp_path):
    archive = _zip_dir(bert_dir[0], tmp_path / "uncased_x.zip")
    cache = tmp_path / "cache"
    with pytest.raises(
        CheckpointError, match=rf"Checksum mismatch .*sha256 {_sha256(archive)}, expected 1111"
    ):
        download_google_checkpoint(archive.as_uri(), cache, sha256="1" * 64)
    assert list(cache.iterdir()) == []


def test_download_preset_name_and_recorded_member_checksums(bert_dir, tmp_path, monkeypatch):
    """Preset names resolve to their checkpoint_url; the opener is patched to
    serve a local archive under the official name. bert_base's archive has
    recorded member checksums (which the stand-in fails), bert_tiny's not."""
    source, _ = bert_dir
    known = google_checkpoints()
    assert known["bert_base"]["url"] == (
        "https://storage.googleapis.com/bert_models/2018_10_18/uncased_L-12_H-768_A-12.zip"
    )
    assert known["albert_base"]["url"].endswith("albert_models/albert_base_v2.tar.gz")
    assert "distilbert_base" not in known  # no Google archive
    served = {}

    def fake_urlopen(url, *args, **kwargs):
        served["url"] = url
        return io.BytesIO(_zip_dir(source, tmp_path / "served.zip", top=False).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(CheckpointError, match=r"bert_config.json has sha256 .* is recorded"):
        download_google_checkpoint("bert_base", tmp_path / "cache")
    assert served["url"] == known["bert_base"]["url"]
    assert list((tmp_path / "cache").iterdir()) == []
    path = download_google_checkpoint("bert_base", tmp_path / "cache", check_recorded=False)
    assert path == tmp_path / "cache" / "uncased_L-12_H-768_A-12"

    # Matching recorded values pass.
    recorded = {"vocab.txt": _sha256(source / "vocab.txt")}
    monkeypatch.setitem(download._RECORDED_MEMBER_SHA256, "uncased_L-2_H-128_A-2.zip", recorded)
    out = download_google_checkpoint("bert_tiny", tmp_path / "cache", output_dir=tmp_path / "p")
    doc = json.loads((out / "config.json").read_text())
    assert doc["metadata"]["checkpoint_url"] == known["bert_tiny"]["url"]
    assert doc["metadata"]["license"] == "Apache-2.0"

    with pytest.raises(CheckpointError, match="Unknown Google checkpoint 'nope'.*bert_base"):
        download_google_checkpoint("nope", tmp_path / "cache")
    with pytest.raises(CheckpointError, match="'distilbert_base' has no official Google archive"):
        download_google_checkpoint("distilbert_base", tmp_path / "cache")


def test_download_refuses_unsafe_archive(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../outside.txt", "x")
    with pytest.raises(CheckpointError, match="unsafe member path"):
        download_google_checkpoint(archive.as_uri(), tmp_path / "cache")
    assert not (tmp_path / "outside.txt").exists()
    assert list((tmp_path / "cache").iterdir()) == []


# === Command line ===
