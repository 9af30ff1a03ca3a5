"""Spawned workers end with their parent (bertzoo.io.children): after a
`kill -9` of the preparing process, its workers went on for 25+ minutes
holding their memory."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_independent  # processes, not tensors

ROOT = Path(__file__).resolve().parents[2]

# A parent that spawns a worker the way `prepare` does (a spawn-context
# ProcessPoolExecutor whose initializer is the preparation worker's),
# prints the worker's pid, and waits to be killed.
PARENT = textwrap.dedent(
    """
    import multiprocessing, sys, time
    from concurrent.futures import ProcessPoolExecutor
    sys.path.insert(0, sys.argv[1])
    from bertzoo.data.prepare_worker import init_spawned_worker
    import os

    if __name__ == "__main__":
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(1, mp_context=context, initializer=init_spawned_worker,
                                   initargs=(None,))
        print(pool.submit(os.getpid).result(), flush=True)
        time.sleep(600)
    """
)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not yet reaped by its new parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_preparation_worker_ends_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), str(ROOT)], stdout=subprocess.PIPE, text=True
    )
    try:
        worker = int(parent.stdout.readline())
        assert _alive(worker)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived its parent"
    finally:
        parent.kill()
        if "worker" in locals() and _alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_the_watching_thread_ends_a_worker_whose_parent_is_gone():
    """The fallback where the kernel's parent-death signal is not there:
    a thread that sees the parent's id change."""
    code = (
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from bertzoo.io import children\n"
        "children._watch(os.getppid() + 1, 0.05)\n"  # not its parent: as if it had gone
        "time.sleep(30)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == 1 and time.monotonic() - started < 20
