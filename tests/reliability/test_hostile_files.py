"""Hostile files (issue 30): sizes in config.json that would be built before
they are checked, zip bombs passed as pytorch_model.bin, JSON nested past
the recursion limit, a model too large to build, and the mode of published
directories.

The memory bombs run in a subprocess (`memory_probe.py`) that measures the
peak resident memory each load takes; each must fail fast, in bounded
memory, with a one-line error naming what is wrong.
"""

import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import bertzoo
from bertzoo.errors import IntegrityError, PresetError
from bertzoo.io.publish import publish_directory
from tests.conftest import edited_by_hand, subprocess_env

pytestmark = pytest.mark.backend_independent  # every refusal comes before a model is built

HERE = Path(__file__).resolve().parent
PROBE = HERE / "memory_probe.py"
FIXTURES = HERE.parent / "fixtures" / "hf_variants"
# A refused file may take this much memory and time, at most.
GROWTH_MIB = 200
SECONDS = 5.0
PICKLE_BOMB = 2 << 30  # declared (and real) size of the zip bombs' members
STORAGE_BOMB = 1 << 30

TWO_LAYERS = dict(
    vocabulary_size=61,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=26,
    max_sequence_length=16,
    dropout=0.0,
)


# === Building the hostile files ===


def _edited(preset, target, **backbone):
    """A copy of `preset` whose config.json's backbone section is updated
    with `backbone` (a None value removes the key; its manifest removed, as
    for a hand-edited preset)."""
    shutil.copytree(preset, target)
    edited_by_hand(target)
    config = json.loads((target / "config.json").read_text())
    config["backbone"].update(backbone)
    config["backbone"] = {k: v for k, v in config["backbone"].items() if v is not None}
    (target / "config.json").write_text(json.dumps(config))
    return target


def _write_zip(path, members):
    """Writes a zip file by hand, streaming. `members`: (name, data), data
    bytes (stored) or an int n: n zero bytes, deflated -- one 16 MiB block
    compressed once and repeated (each copy ends on a full flush, so the
    copies chain), so a 2 GiB member takes 2 MB and a fraction of a second."""
    chunk = bytes(16 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # an empty last block
    central = []
    with open(path, "wb") as f:
        for name, data in members:
            encoded, offset = name.encode(), f.tell()
            if isinstance(data, int):
                assert data % len(chunk) == 0
                repeats, crc = data // len(chunk), 0
                for _ in range(repeats):
                    crc = zlib.crc32(chunk, crc)
                method, size, stored = 8, data, len(block) * repeats + len(final)
            else:
                method, size, stored, crc = 0, len(data), len(data), zlib.crc32(data)
            fields = (method, 0, 0x21, crc, stored, size, len(encoded))
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, *fields, 0) + encoded)
            if isinstance(data, int):
                for _ in range(repeats):
                    f.write(block)
                f.write(final)
            else:
                f.write(data)
            central.append((fields, encoded, offset))
        start = f.tell()
        for fields, encoded, offset in central:
            header = struct.pack(
                "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, *fields, 0, 0, 0, 0, 0, offset
            )
            f.write(header + encoded)
        size = f.tell() - start
        f.write(
            struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), size, start, 0)
        )
    return path


def _str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _int(n):
    return b"J" + struct.pack("<i", n)


def _one_tensor_pickle(name, numel):
    """torch.save's pickle of {name: a float32 tensor of `numel` elements
    in storage "0"} (raw opcodes, as in tests/convert/test_hf_variants.py)."""
    out = b"\x80\x02ccollections\nOrderedDict\n)R("
    out += _str(name) + b"ctorch._utils\n_rebuild_tensor_v2\n("
    out += b"(" + _str("storage") + b"ctorch\nFloatStorage\n" + _str("0")
    out += _str("cpu") + _int(numel) + b"tQ"
    out += _int(0) + b"(" + _int(numel) + b"t" + b"(" + _int(1) + b"t" + b"\x89"
    out += b"ccollections\nOrderedDict\n)RtR"
    return out + b"u."


def _memory_bytes():
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _hostile_cases(root):
    """(name, call, path, expected error pattern) for each hostile file."""
    preset = root / "two_layers"
    bertzoo.BertBackbone(**TWO_LAYERS).save_to_preset(preset)
    cases = [
        ("valid preset (warm-up)", "backbone", preset, None),
        (
            "vocabulary_size 2e7",
            "backbone",
            _edited(preset, root / "vocab_2e7", vocabulary_size=20_000_000),
            r"backbone\.vocabulary_size is 20,000,000, above the largest bertzoo builds "
            r"\(2,097,152\)",
        ),
        (
            "num_layers 1e6",
            "backbone",
            _edited(preset, root / "layers_1e6", num_layers=1_000_000),
            r"backbone\.num_layers is 1,000,000, above the largest bertzoo builds \(256\)",
        ),
        (
            "vocabulary_size 2e6, weights of 61",
            "backbone",
            _edited(preset, root / "vocab_2e6", vocabulary_size=2_000_000),
            r"backbone\.vocabulary_size is 2,000,000, but \S+model\.weights\.h5 holds 61 "
            r"\(layers/bert_embeddings/token_embedding/vars/0 has shape \[61, 16\]\)",
        ),
        (
            # Without num_groups (as a config written by hand may be), each
            # layer has its own block: the weights file counts them.
            "num_layers 200, weights of 2",
            "backbone",
            _edited(preset, root / "layers_200", num_layers=200, num_groups=None),
            r"backbone\.num_layers is 200, but \S+model\.weights\.h5 holds 2 "
            r"\(2 transformer blocks\)",
        ),
    ]
    # Within every bound, but twice this machine's memory as float32 weights.
    hidden = -(-2 * _memory_bytes() // (4 * 2_000_000) // 64) * 64
    if hidden <= 65_536:
        cases.append(
            (
                "weights twice the machine's memory",
                "architecture",
                _edited(
                    preset,
                    root / "too_large",
                    vocabulary_size=2_000_000,
                    hidden_dim=hidden,
                    embedding_dim=hidden,
                ),
                r"the backbone's sizes make about [\d,]+ parameters .* more than this "
                r"machine's [\d.,]+ GiB of memory",
            )
        )
    # A Hugging Face directory whose only weights are a zip bomb: the pickle
    # is inspected (for the pooler) even with allow_pickle=False and
    # load_weights=False.
    hf = root / "hf_bomb"
    shutil.copytree(FIXTURES / "bert_mlm_bin", hf)
    _write_zip(
        hf / "pytorch_model.bin",
        [("archive/data.pkl", PICKLE_BOMB), ("archive/byteorder", b"little")],
    )
    cases.append(
        (
            "pytorch_model.bin whose data.pkl inflates to 2 GiB",
            "architecture",
            hf,
            r"pytorch_model\.bin: its members declare 2,147,483,654 bytes uncompressed "
            r"\(archive/data\.pkl: 2,147,483,648\) in a [\d,]+-byte file; .* zip bomb",
        )
    )
    # A valid state-dict pickle whose one storage inflates to 1 GiB.
    storage = _write_zip(
        root / "storage_bomb.bin",
        [
            ("archive/data.pkl", _one_tensor_pickle("w", STORAGE_BOMB // 4)),
            ("archive/byteorder", b"little"),
            ("archive/data/0", STORAGE_BOMB),
        ],
    )
    cases.append(
        (
            "a storage that inflates to 1 GiB",
            "torch_pickle",
            storage,
            r"storage_bomb\.bin: its members declare [\d,]+ bytes uncompressed "
            r"\(archive/data/0: 1,073,741,824\) .* zip bomb",
        )
    )
    return cases + _oversized_files(root, preset) + _round_three_bombs(root, preset)


def _round_three_bombs(root, preset):
    """Round 3's surfaces, each a hostile directory that recomputes its own
    manifest: a prepared.json count of 1e9 documents (the held-out draw
    allocated from it: over 6 GiB in 23 s), a LoRA adapter of rank 1e6
    (factors built before any check: over 6 GiB in 9 s) and one whose npz
    member inflates to 2 GiB (over 6 GiB in 12 s), and a ModernBERT window of
    1e9 (its band built: over 6 GiB in 9-16 s)."""
    from bertzoo.data.prepare import PREPARED_FILE, PrepareSettings, prepare_corpus
    from bertzoo.models import lora
    from tests.conftest import reseal_manifest
    from tests.data.prepared_corpus import character_tokenizer, mixed_documents, write_documents

    corpus = write_documents(root / "c.txt", mixed_documents(12, seed=1))
    prepared = root / "prepared_1e9"
    prepare_corpus([corpus], character_tokenizer(), prepared, PrepareSettings(workers=1))
    document = json.loads((prepared / PREPARED_FILE).read_text())
    document["shards"][0]["documents"] = 10**9
    document["summary"]["documents"] = sum(s["documents"] for s in document["shards"])
    (prepared / PREPARED_FILE).write_text(json.dumps(document))
    reseal_manifest(prepared)

    def adapter(name, edit):
        folder = root / name
        model = bertzoo.BertClassifier(bertzoo.BertBackbone(**TWO_LAYERS), num_classes=2)
        model.save_to_preset(folder / "base")
        model.enable_lora(rank=2)
        model.save_lora_adapter(folder / "adapter")
        edit(folder / "adapter")
        reseal_manifest(folder / "adapter")
        return folder

    def rank(folder):
        config = json.loads((folder / lora.ADAPTER_CONFIG).read_text())
        (folder / lora.ADAPTER_CONFIG).write_text(json.dumps({**config, "rank": 1_000_000}))

    def bomb(folder):
        import zipfile

        with zipfile.ZipFile(folder / lora.ADAPTER_FILE) as archive:
            names = archive.namelist()
        _write_zip(
            folder / lora.ADAPTER_FILE, [(names[0], PICKLE_BOMB)] + [(n, b"") for n in names[1:]]
        )

    return [
        (
            "prepared.json of 1e9 documents",
            "prepared",
            prepared,
            r"counts .*'documents': 1000000000.* need at least [\d,]+ bytes; the shard file has",
        ),
        (
            "LoRA adapter of rank 1e6",
            "lora",
            adapter("lora_rank", rank),
            r"rank 1,000,000 is above",
        ),
        (
            "LoRA adapter whose npz inflates to 2 GiB",
            "lora",
            adapter("lora_bomb", bomb),
            r"inflates to 2,147,483,648 bytes",
        ),
        (
            "local_attention_window 1e9",
            "backbone",
            _edited(
                preset,
                root / "window_1e9",
                local_attention_window=1_000_000_000,
                global_attention_every=2,  # layer 2 of 2 is local
            ),
            r"local_attention_window=1,000,000,000 is wider than",
        ),
    ]


def _sparse(path, size):
    """A file of `size` bytes that takes no disk (a hole), as a hostile
    directory may ship: only its size is ever looked at."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def _oversized_files(root, preset):
    """Files over their cap (bertzoo.io.bounded), refused by their size
    before a byte is read, and merges past the vocabulary cap, refused
    before one is checked (a 545 MB vocab.json with its merges passed
    6 GiB at 157 s; a 322 MB sentencepiece.bpe.model at 110 s; 10M
    duplicate merges took 3.5 GiB before TensorFlow's table refused them)."""
    config = root / "config_64mib"
    shutil.copytree(preset, config)
    edited_by_hand(config)
    _sparse(config / "config.json", 64 << 20)
    (root / "wordpiece").mkdir()
    (root / "xlmr").mkdir()
    merges = root / "merges_1e7"
    merges.mkdir()
    tokens = ["<s>", "<pad>", "</s>", "<unk>", "a", "b", "ab", "<mask>"]
    (merges / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    with open(merges / "merges.txt", "w") as f:
        f.write("#version: 0.2\n")
        for _ in range(100):
            f.write("a b\n" * 100_000)
    return [
        (
            "config.json of 64 MiB",
            "backbone",
            config,
            r"config\.json is 67,108,864 bytes, more than the 16 MiB a config file may take",
        ),
        (
            "vocab.txt of 200 MiB",
            "wordpiece",
            _sparse(root / "wordpiece" / "vocab.txt", 200 << 20),
            r"vocab\.txt is 209,715,200 bytes, more than the 128 MiB a vocabulary file may take",
        ),
        (
            "sentencepiece.bpe.model of 322 MiB",
            "sentencepiece",
            _sparse(root / "xlmr" / "sentencepiece.bpe.model", 322 << 20),
            r"sentencepiece\.bpe\.model is 337,641,472 bytes, more than the 128 MiB a "
            r"SentencePiece model may take",
        ),
        (
            "merges.txt of 10M merges",
            "byte_bpe",
            merges,
            r"merges\.txt lists 10,000,000 merges; .* at most 2,097,152 tokens",
        ),
    ]


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Every hostile case loaded once, in one subprocess: {name: (report,
    expected pattern)}."""
    cases = _hostile_cases(tmp_path_factory.mktemp("hostile"))
    argument = json.dumps([{"name": n, "call": c, "path": str(p)} for n, c, p, _ in cases])
    try:
        done = subprocess.run(
            [sys.executable, str(PROBE), argument],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=300,
        )
        output, tail = done.stdout, done.stderr[-3000:]
    except subprocess.TimeoutExpired as e:
        output, tail = (e.stdout or b"").decode(), "timed out after 300 s"
    reports = {r["name"]: r for r in map(json.loads, output.splitlines())}
    for name, *_ in cases:
        if name in reports:
            r = reports[name]
            print(f"\n{name}: {r['seconds']:.2f} s, {r['growth_mib']:.0f} MiB: {r['error']}")
    return {name: (reports.get(name), pattern, tail) for name, _, _, pattern in cases}


HOSTILE = [
    "vocabulary_size 2e7",
    "num_layers 1e6",
    "vocabulary_size 2e6, weights of 61",
    "num_layers 200, weights of 2",
    "weights twice the machine's memory",
    "pytorch_model.bin whose data.pkl inflates to 2 GiB",
    "a storage that inflates to 1 GiB",
    "config.json of 64 MiB",
    "vocab.txt of 200 MiB",
    "sentencepiece.bpe.model of 322 MiB",
    "merges.txt of 10M merges",
    "prepared.json of 1e9 documents",
    "LoRA adapter of rank 1e6",
    "LoRA adapter whose npz inflates to 2 GiB",
    "local_attention_window 1e9",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_file_fails_fast_in_bounded_memory(probed, name):
    report, pattern, tail = probed[name] if name in probed else (None, None, None)
    if name not in probed:
        pytest.skip("this machine has too much memory for a config within every bound to exceed it")
    assert report is not None, f"the probe never finished this load: {tail}"
    error = report["error"]
    assert error is not None, f"loaded without an error ({report['growth_mib']:.0f} MiB)"
    kind, _, message = error.partition(": ")
    assert kind in (
        "PresetError",
        "CheckpointError",
        "ArchiveSizeError",
        "TokenizerError",
        "CorpusError",
        "LoraError",
    ), error
    assert "\n" not in message, f"not one line: {message!r}"
    assert re.search(pattern, message), message
    assert report["seconds"] < SECONDS, report
    assert report["growth_mib"] < GROWTH_MIB, report


# === JSON nested past the recursion limit ===

DEEP = "[" * 100_000 + "]" * 100_000


def test_deeply_nested_json_is_a_one_line_error(tmp_path):
    preset = tmp_path / "preset"
    bertzoo.BertBackbone(**TWO_LAYERS).save_to_preset(preset)
    # The manifest first: it is read before anything else.
    manifest = tmp_path / "manifest"
    shutil.copytree(preset, manifest)
    (manifest / "bertzoo-manifest.json").write_text(DEEP)
    with pytest.raises(IntegrityError, match="nested too deeply") as e:
        bertzoo.BertBackbone.from_preset(manifest)
    assert "\n" not in str(e.value)
    # A preset's config.json (without a manifest, as edited by hand).
    edited_by_hand(preset)
    (preset / "config.json").write_text('{"backbone": ' + DEEP + "}")
    classifier = lambda path: bertzoo.BertClassifier.from_preset(path, num_classes=2)  # noqa: E731
    for load in (bertzoo.BertBackbone.from_preset, classifier):
        with pytest.raises(PresetError, match=r"config\.json: invalid JSON: .*nested too deeply"):
            load(preset)
    # A Hugging Face config.json.
    hf = tmp_path / "hf"
    shutil.copytree(FIXTURES / "distilbert", hf)
    (hf / "config.json").write_text('{"model_type": "distilbert", "x": ' + DEEP + "}")
    with pytest.raises(PresetError, match="nested too deeply") as e:
        bertzoo.BertBackbone.from_preset(hf)
    assert "\n" not in str(e.value)


# === Configs compared with their weights' shapes before building ===


def test_hf_config_is_compared_with_its_safetensors_before_building(tmp_path):
    for key, value, pattern in [
        ("vocab_size", 1_000_000, r"backbone\.vocabulary_size is 1,000,000, but \S+ holds 99"),
        ("n_layers", 200, r"backbone\.num_layers is 200, but \S+ holds 2 \(tensors of 2 layers\)"),
        ("max_position_embeddings", 4096, r"backbone\.max_sequence_length is 4,096, .* holds 40"),
    ]:
        hf = tmp_path / key
        shutil.copytree(FIXTURES / "distilbert", hf)
        config = json.loads((hf / "config.json").read_text())
        config[key] = value
        (hf / "config.json").write_text(json.dumps(config))
        with pytest.raises(PresetError, match=pattern):
            bertzoo.BertBackbone.from_preset(hf)
        # Without weights it is only an architecture: built as asked.
        if key == "max_position_embeddings":
            bertzoo.BertBackbone.from_preset(hf, load_weights=False)


# === Out of memory while building ===


class _NoMemory(bertzoo.BertBackbone):
    error = MemoryError

    def __init__(self, **config):
        raise type(self).error("cannot allocate 21474836480 bytes\nand more lines")


def test_out_of_memory_while_building_is_a_one_line_preset_error(tmp_path):
    import tensorflow as tf

    preset = tmp_path / "preset"
    bertzoo.BertBackbone(**TWO_LAYERS).save_to_preset(preset)

    def resource_exhausted(message):
        return tf.errors.ResourceExhaustedError(None, None, message)

    for error in (MemoryError, resource_exhausted):
        _NoMemory.error = staticmethod(error)
        with pytest.raises(PresetError, match=r"not enough memory to build this backbone") as e:
            _NoMemory.from_preset(preset)
        assert "\n" not in str(e.value)


# === Published directories get the umask's mode ===


@pytest.mark.parametrize("umask, mode", [(0o022, 0o755), (0o027, 0o750)])
def test_published_directories_get_the_umask_mode(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        with publish_directory(tmp_path / "export", "export") as staging:
            (staging / "file.txt").write_text("x")
        bertzoo.BertBackbone(**TWO_LAYERS).save_to_preset(tmp_path / "preset")
        bertzoo.BertBackbone(**TWO_LAYERS).save_to_preset(tmp_path / "preset")  # a swap
    finally:
        os.umask(previous)
    for directory in (tmp_path / "export", tmp_path / "preset"):
        assert stat.S_IMODE(directory.stat().st_mode) == mode, directory
