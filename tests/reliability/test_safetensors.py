"""Malformed safetensors files never load (issue 14, item 6).

Every malformed file is a `SafetensorsError` (a `PresetError`) with a
one-line message naming the file and, where one is at fault, the tensor;
integer or bool tensors where float weights belong are refused by the
loaders; valid files (F32, F16, BF16, ints, bools) still round-trip.
"""

import json
import shutil
import struct

import keras
import numpy as np
import pytest
import safetensors

import bertzoo
from bertzoo.convert import CheckpointError, save_hf
from bertzoo.convert.bertzoo_format import load_task_head_file
from bertzoo.convert.hf.families import SPECS
from bertzoo.convert.hf.weights import variable_map
from bertzoo.errors import PresetError
from bertzoo.io import safetensors as safetensors_io
from bertzoo.io.safetensors import (
    SafetensorsError,
    read_safetensors,
    tensor_names,
    write_safetensors,
)
from bertzoo.models.tasks import BertClassifier
from tests.conftest import tiny_backbone

pytestmark = pytest.mark.backend_independent

_F32 = np.arange(6, dtype="<f4").tobytes()  # 24 bytes: F32[2, 3] or F32[6]


def _entry(dtype="F32", shape=(2, 3), offsets=(0, 24)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def _file(header, body=_F32, length=None):
    """A safetensors file: `header` is a JSON-able object or raw bytes;
    `length` overrides the header length field."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode("utf-8")
    return struct.pack("<Q", len(raw) if length is None else length) + raw + body


def _split(blob):
    (n,) = struct.unpack("<Q", blob[:8])
    return n, json.loads(blob[8 : 8 + n]), blob[8 + n :]


def _assert_refused(path, error, tensor=None, match=None):
    message = str(error.value)
    assert isinstance(error.value, PresetError)
    assert "\n" not in message, message
    assert str(path) in message, message
    if tensor is not None:
        assert repr(tensor) in message, message
    if match is not None:
        assert match.lower() in message.lower(), message


# A header padded with spaces, as writers do to align the data.
_PADDED = json.dumps({"a": _entry(shape=[6])}).encode() + b" " * 6

# (id, file bytes, tensor at fault or None, a phrase of the message)
MALFORMED = [
    (
        "overlapping_offsets",
        _file(
            {"a": _entry(shape=[2], offsets=[0, 8]), "b": _entry(shape=[4], offsets=[4, 20])},
            _F32[:20],
        ),
        "b",
        "overlaps",
    ),
    (
        "overlap_same_range",
        _file({"a": _entry(shape=[6]), "b": _entry(shape=[6])}),
        "b",
        "overlaps",
    ),
    (
        "offsets_past_end",
        _file({"a": _entry(shape=[8], offsets=[0, 32])}),
        "a",
        "truncated or corrupt",
    ),
    (
        "offsets_far_out_of_bounds",
        _file({"a": _entry(shape=[6], offsets=[100, 124])}),
        "a",
        "truncated or corrupt",
    ),
    (
        "gap_between_tensors",
        _file({"a": _entry(shape=[2], offsets=[0, 8]), "b": _entry(shape=[3], offsets=[12, 24])}),
        "b",
        "unused bytes",
    ),
    ("gap_at_start", _file({"a": _entry(shape=[5], offsets=[4, 24])}), "a", "unused bytes"),
    ("trailing_bytes", _file({"a": _entry()}, _F32 + b"\0" * 4), "a", "4 bytes follow"),
    ("truncated_body", _file({"a": _entry()}, _F32[:20]), "a", "truncated or corrupt"),
    ("empty_header_with_body", _file({}, _F32), None, "24 bytes follow"),
    ("negative_dims", _file({"a": _entry(shape=[-2, -3])}), "a", "shape"),
    ("float_dims", _file({"a": _entry(shape=[2.0, 3])}), "a", "shape"),
    ("bool_dims", _file({"a": _entry(shape=[True, 6])}), "a", "shape"),
    (
        "shape_not_a_list",
        _file({"a": {"dtype": "F32", "shape": "23", "data_offsets": [0, 24]}}),
        "a",
        "shape",
    ),
    ("shape_size_mismatch", _file({"a": _entry(shape=[2, 2])}), "a", "needs 16 bytes"),
    (
        "shape_overflow",
        _file({"a": _entry(shape=[2**62, 2**62])}),
        "a",
        "bytes but its data_offsets",
    ),
    ("unknown_dtype", _file({"a": _entry(dtype="F31")}), "a", "unsupported dtype"),
    ("dtype_unsupported_u32", _file({"a": _entry(dtype="U32")}), "a", "unsupported dtype"),
    (
        "dtype_unsupported_f8",
        _file({"a": _entry(dtype="F8_E4M3", shape=[24])}),
        "a",
        "unsupported dtype",
    ),
    ("dtype_not_a_string", _file({"a": _entry(dtype=5)}), "a", "dtype"),
    ("header_is_a_list", _file(b"[1, 2]"), None, "JSON object"),
    ("header_is_a_string", _file(b'"a"', b""), None, "JSON object"),
    ("header_is_null", _file(b"null", b""), None, "JSON object"),
    ("entry_not_an_object", _file({"a": [0, 24]}), "a", "JSON object"),
    ("entry_missing_offsets", _file({"a": {"dtype": "F32", "shape": [2, 3]}}), "a", "data_offsets"),
    ("entry_missing_dtype", _file({"a": {"shape": [2, 3], "data_offsets": [0, 24]}}), "a", "dtype"),
    ("offsets_as_strings", _file({"a": _entry(offsets=["0", "24"])}), "a", "data_offsets"),
    ("offsets_as_floats", _file({"a": _entry(offsets=[0.0, 24.0])}), "a", "data_offsets"),
    ("three_offsets", _file({"a": _entry(offsets=[0, 24, 24])}), "a", "data_offsets"),
    ("offsets_reversed", _file({"a": _entry(shape=[0], offsets=[24, 0])}), "a", "data_offsets"),
    ("negative_offset", _file({"a": _entry(offsets=[-24, 0])}), "a", "data_offsets"),
    ("offsets_not_a_list", _file({"a": _entry(offsets={"0": 24})}), "a", "data_offsets"),
    (
        "duplicate_tensor_name",
        _file(
            b'{"a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}, '
            b'"a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}'
        ),
        "a",
        "twice",
    ),
    (
        "nan_in_header",
        _file(b'{"a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24], "x": NaN}}'),
        None,
        "NaN",
    ),
    ("metadata_not_strings", _file({"__metadata__": {"format": 1}}, b""), None, "__metadata__"),
    ("metadata_not_an_object", _file({"__metadata__": ["pt"]}, b""), None, "__metadata__"),
    (
        "header_length_past_eof",
        _file({"a": _entry()}, length=10_000),
        None,
        "truncated or not a safetensors file",
    ),
    (
        "header_length_huge",
        _file(b"{}", b"", length=2**63),
        None,
        "truncated or not a safetensors file",
    ),
    (
        # The JSON is padded with spaces, so it parses: the body starts 5 bytes early.
        "header_length_5_short",
        _file(_PADDED, length=len(_PADDED) - 5),
        "a",
        "5 bytes follow",
    ),
    (
        "header_invalid_utf8",
        _file(b'{"\xff\xfe": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}'),
        None,
        "UTF-8",
    ),
    ("header_not_json", _file(b"{not json", b""), None, "corrupt safetensors header"),
    ("header_trailing_nul", _file(b"{}\0\0", b""), None, "corrupt safetensors header"),
    ("zero_length_file", b"", None, "only 0 bytes"),
    ("shorter_than_length_field", b"\x01\x00\x00", None, "only 3 bytes"),
]


@pytest.mark.parametrize(
    "blob,tensor,match", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
@pytest.mark.parametrize("reader", [read_safetensors, tensor_names], ids=["read", "names"])
def test_malformed_files_are_refused(tmp_path, reader, blob, tensor, match):
    path = tmp_path / "model.safetensors"
    path.write_bytes(blob)
    with pytest.raises(SafetensorsError) as error:
        reader(path)
    _assert_refused(path, error, tensor, match)


def test_missing_and_directory_paths(tmp_path):
    for path in (tmp_path / "absent.safetensors", tmp_path):
        for reader in (read_safetensors, tensor_names):
            with pytest.raises(SafetensorsError) as error:
                reader(path)
            _assert_refused(path, error, match="cannot read")


def test_errors_only_the_package_finds_name_the_tensor(tmp_path, monkeypatch):
    """What the safetensors package refuses is refused even where bertzoo's
    own checks pass, mapped to one SafetensorsError naming the tensor."""
    path = tmp_path / "x.safetensors"
    write_safetensors(path, {"b": np.ones(3, "float32")})

    def refuse(data):
        raise safetensors.SafetensorError(
            "Error while deserializing header: invalid offset for tensor `b`"
        )

    monkeypatch.setattr(safetensors, "deserialize", refuse)
    with pytest.raises(SafetensorsError) as error:
        read_safetensors(path)
    _assert_refused(path, error, "b", "invalid offset")
    assert "deserializing" not in str(error.value)


# === The real all-MiniLM-L6-v2 checkpoint ===


def _minilm_copy(minilm_dir, tmp_path):
    directory = tmp_path / "minilm"
    shutil.copytree(minilm_dir, directory)
    return directory, directory / "model.safetensors"


def test_minilm_header_length_5_bytes_short(minilm_dir, tmp_path):
    """The header is padded with spaces, so a length 5 bytes short still
    parses: the old reader loaded every tensor 5 bytes off (NaN / 3.4e38)."""
    directory, path = _minilm_copy(minilm_dir, tmp_path)
    blob = path.read_bytes()
    n, header, _ = _split(blob)
    assert blob[8 + n - 5 : 8 + n] == b" " * 5  # still valid JSON when cut
    path.write_bytes(struct.pack("<Q", n - 5) + blob[8:])
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])
    for reader in (read_safetensors, tensor_names):
        with pytest.raises(SafetensorsError) as error:
            reader(path)
        _assert_refused(path, error, last, "5 bytes follow")
    with pytest.raises(SafetensorsError) as error:
        bertzoo.BertBackbone.from_preset(directory)
    _assert_refused(path, error, last, "5 bytes follow")


def test_minilm_dtype_relabelled_f32_as_i32(minilm_dir, tmp_path):
    """F32 -> I32 keeps the byte size, so the file itself is valid: the
    loader must refuse an integer tensor where a weight belongs."""
    directory, path = _minilm_copy(minilm_dir, tmp_path)
    name = "encoder.layer.0.attention.self.query.weight"
    blob = path.read_bytes()
    old = f'"{name}":{{"dtype":"F32"'.encode()
    assert blob.count(old) == 1
    path.write_bytes(blob.replace(old, old.replace(b"F32", b"I32")))
    assert read_safetensors(path)[name].dtype == np.int32  # well formed
    with pytest.raises(PresetError) as error:
        bertzoo.BertBackbone.from_preset(directory)
    _assert_refused(path, error, name, "int32")


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_minilm_int_or_bool_weight(minilm_dir, tmp_path, dtype):
    directory, path = _minilm_copy(minilm_dir, tmp_path)
    tensors = read_safetensors(path)
    name = "embeddings.LayerNorm.weight"
    tensors[name] = np.ones(tensors[name].shape, dtype)
    write_safetensors(path, tensors, metadata={"format": "pt"})
    with pytest.raises(PresetError) as error:
        bertzoo.BertBackbone.from_preset(directory)
    _assert_refused(path, error, name, dtype)


# === Small Hugging Face directories ===


def _tiny_hf(tmp_path, **overrides):
    directory = tmp_path / "hf"
    save_hf(tiny_backbone(**overrides), directory)
    for extra in directory.iterdir():  # a plain HF directory: no bertzoo manifest
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()
    return directory, directory / "model.safetensors"


def _loaded(backbone):
    """The backbone's weights in HF names and layout."""
    out = {}
    for name, (variable, transpose) in variable_map(backbone, SPECS["bert"]).items():
        value = np.asarray(keras.ops.convert_to_numpy(variable))
        out[name] = value.T if transpose else value
    return out


@pytest.mark.parametrize("name", ["encoder.layer.1.output.dense.bias", "pooler.dense.weight"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool"])
def test_tiny_int_or_bool_weights_are_refused(tmp_path, name, dtype):
    directory, path = _tiny_hf(tmp_path)
    tensors = read_safetensors(path)
    tensors[name] = np.zeros(tensors[name].shape, dtype)
    write_safetensors(path, tensors)
    with pytest.raises(CheckpointError) as error:
        bertzoo.BertBackbone.from_preset(directory)
    _assert_refused(path, error, name, dtype)
    # allow_partial does not let a non-float weight through either.
    with pytest.raises(CheckpointError):
        bertzoo.BertBackbone.from_preset(directory, allow_partial=True)


def test_int_head_tensor_is_refused(tmp_path):
    """Task-head tensors are kept for task models and written back by
    save_hf: an integer one is refused when the checkpoint is read."""
    directory, path = _tiny_hf(tmp_path)
    tensors = read_safetensors(path)
    tensors = {f"bert.{k}": v for k, v in tensors.items()}
    tensors["classifier.weight"] = np.zeros((3, 10), "float32")
    tensors["classifier.bias"] = np.zeros(3, "int64")
    write_safetensors(path, tensors)
    with pytest.raises(CheckpointError) as error:
        bertzoo.BertBackbone.from_preset(directory)
    _assert_refused(path, error, "classifier.bias", "int64")


def test_int_task_head_file_is_refused(tmp_path):
    model = BertClassifier(tiny_backbone(), num_classes=3)
    variables = model.head_variables()
    tensors = {k: np.zeros(tuple(v.shape), "float32") for k, v in variables.items()}
    bias = next(k for k in tensors if k.endswith("bias"))
    tensors[bias] = np.zeros(tensors[bias].shape, "int32")
    path = tmp_path / "task_head.safetensors"
    write_safetensors(path, tensors)
    with pytest.raises(CheckpointError) as error:
        load_task_head_file(model, path)
    _assert_refused(path, error, bias, "int32")
    with pytest.raises(SafetensorsError) as error:
        read_safetensors(path, float_only=True)
    _assert_refused(path, error, bias, "I32")


def _bf16_bits(values):
    return (np.asarray(values, "<f4").view("<u4") >> 16).astype("<u2")


def _write_with_package(path, arrays):
    """Writes `{name: (dtype name, uint16 or other array)}` with the
    safetensors package (bertzoo cannot write BF16: numpy has no bfloat16)."""
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
        specs = {
            name: safetensors.TensorSpec(
                dtype=dtype, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes
            )
            for name, (dtype, a) in arrays.items()
        }
    else:
        specs = {
            name: {"dtype": dtype, "shape": list(a.shape), "data": a.tobytes()}
            for name, (dtype, a) in arrays.items()
        }
    path.write_bytes(bytes(safetensors.serialize(specs, metadata={"format": "pt"})))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_checkpoints_load(tmp_path, dtype):
    directory, path = _tiny_hf(tmp_path)
    tensors = read_safetensors(path)
    arrays, expected = {}, {}
    for name, value in tensors.items():
        if dtype == "bfloat16":
            bits = np.ascontiguousarray(_bf16_bits(value))
            arrays[name] = ("bfloat16", bits)
            expected[name] = (bits.astype(np.uint32) << 16).view(np.float32)
        else:
            half = np.ascontiguousarray(value.astype("<f2"))
            arrays[name] = ("float16", half)
            expected[name] = half.astype("float32")
    _write_with_package(path, arrays)
    back = read_safetensors(path, float_only=True)
    for name, value in expected.items():
        assert back[name].dtype == (np.float32 if dtype == "bfloat16" else np.float16)
        np.testing.assert_array_equal(back[name].astype("float32"), value)
    backbone = bertzoo.BertBackbone.from_preset(directory)
    loaded = _loaded(backbone)
    for name, value in expected.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)


# === Valid files ===


def test_round_trip_all_dtypes(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "f32": rng.normal(size=(3, 4)).astype("float32"),
        "f64": rng.normal(size=(2,)),
        "f16": rng.normal(size=(5,)).astype("float16"),
        "i64": np.arange(6, dtype="int64").reshape(2, 3) - 3,
        "i32": np.array([-(2**31), 2**31 - 1], "int32"),
        "i16": np.array([-7, 7], "int16"),
        "i8": np.array([-128, 127], "int8"),
        "u8": np.array([0, 255], "uint8"),
        "bool": np.array([[True, False], [False, True]]),
        "scalar": np.float32(2.5),
        "empty": np.zeros((0, 3), "float32"),
        "strided": np.arange(12, dtype="float32").reshape(3, 4)[:, ::2],
        "big_endian": np.arange(4, dtype=">f4"),
    }
    path = tmp_path / "w.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt", "n": 3})
    back = read_safetensors(path)
    assert sorted(back) == sorted(tensors) == sorted(tensor_names(path))
    for name, value in tensors.items():
        assert back[name].dtype == value.dtype.newbyteorder("="), name
        assert back[name].shape == np.shape(value), name
        np.testing.assert_array_equal(back[name], value)
        assert back[name].flags.writeable
    # The package reads what bertzoo writes, metadata included.
    with safetensors.safe_open(path, framework="numpy") as f:
        assert f.metadata() == {"format": "pt", "n": "3"}
        np.testing.assert_array_equal(f.get_tensor("f32"), tensors["f32"])


def test_float_only_accepts_floats(tmp_path):
    path = tmp_path / "w.safetensors"
    write_safetensors(
        path, {"a": np.ones(2, "float16"), "b": np.ones(2), "c": np.ones(2, "float32")}
    )
    assert sorted(read_safetensors(path, float_only=True)) == ["a", "b", "c"]
    write_safetensors(path, {"a": np.ones(2, "float32"), "z": np.ones(2, bool)})
    with pytest.raises(SafetensorsError) as error:
        read_safetensors(path, float_only=True)
    _assert_refused(path, error, "z", "BOOL")


def test_bfloat16_read_exactly(tmp_path):
    values = np.array([1.0, -2.5, 3.140625, 0.0, -0.0, np.inf, 1e38, 2.0**-130], "float32")
    bits = _bf16_bits(values)
    header = {"x": _entry("BF16", [2, 4], [0, 16]), "__metadata__": {"format": "pt"}}
    path = tmp_path / "b.safetensors"
    path.write_bytes(_file(header, bits.tobytes()))
    x = read_safetensors(path)["x"]
    assert x.dtype == np.float32 and x.shape == (2, 4)
    np.testing.assert_array_equal(x.ravel(), (bits.astype(np.uint32) << 16).view(np.float32))
    np.testing.assert_array_equal(x.ravel()[:5], values[:5])  # exact in bfloat16
    # The same through the package's own writer.
    _write_with_package(path, {"x": ("bfloat16", bits), "y": ("int64", np.arange(3, dtype="<i8"))})
    back = read_safetensors(path)
    np.testing.assert_array_equal(back["x"], (bits.astype(np.uint32) << 16).view(np.float32))
    np.testing.assert_array_equal(back["y"], np.arange(3))


def test_write_refuses_unsupported_dtypes(tmp_path):
    path = tmp_path / "w.safetensors"
    for value in (np.zeros(2, "complex64"), np.array(["a"]), np.zeros(2, "uint32")):
        with pytest.raises(SafetensorsError) as error:
            write_safetensors(path, {"t": value})
        _assert_refused(path, error, "t")
    assert not path.exists()


def test_error_class():
    assert issubclass(SafetensorsError, PresetError)
    assert safetensors_io.SafetensorsError is bertzoo.convert.SafetensorsError
