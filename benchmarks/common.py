"""What every benchmark records: the machine and the software versions;
and a child process per backend."""

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_info():
    """CPU model, core count and the instruction sets that decide the bf16
    path (AVX512-BF16, AMX), from /proc/cpuinfo where there is one."""
    flags, model = set(), platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {
        "model": model,
        "cores": os.cpu_count(),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "avx512_vnni": "avx512_vnni" in flags,
        "amx_bf16": "amx_bf16" in flags,
    }


def versions(*modules):
    """name -> __version__ of the importable ones."""
    import importlib

    found = {}
    for name in modules:
        try:
            found[name] = importlib.import_module(name).__version__
        except ImportError:
            pass
    return found


def latency(call, calls):
    """The first call of `call` (tracing, set-up) on its own, then the
    median and 90th percentile of `calls` more, in milliseconds."""
    import numpy as np

    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {
        "first_call_ms": round(first * 1000, 1),
        "median_ms": round(float(np.median(times)) * 1000, 2),
        "p90_ms": round(float(np.percentile(times, 90)) * 1000, 2),
    }


def backend_child(script, backend, task):
    """Runs `script --child TASK` (`task` as JSON) in a fresh process under
    Keras `backend`, the checkout first on the path, and returns the JSON
    of its last output line; exits with its error output if it fails."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(script), "--child", json.dumps(task)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        sys.exit(f"{backend} {task}: failed\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
