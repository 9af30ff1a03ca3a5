"""Quiet by default: the recipes and `python -m bertzoo` show no TensorFlow,
absl or CUDA banner lines.

TensorFlow writes them from C++, on file descriptor 2, where Python's
logging cannot reach:

- while `import tensorflow` runs (twice: two shared libraries each log
  through their own absl copy, before `absl::InitializeLog()`), INFO lines
  about oneDNN, missing CUDA drivers and CPU instructions, which
  `TF_CPP_MIN_LOG_LEVEL` does not hide (measured on TensorFlow 2.21);
- later, `E0000 ... failed call to cuInit` on a machine without a GPU and
  `E0000 ... oneDNN supports DT_INT64 only on platforms with AVX-512`, at
  error level, which only `TF_CPP_MIN_LOG_LEVEL=3` hides (2 shows them).

`quiet_tensorflow()` sets `TF_CPP_MIN_LOG_LEVEL=3` (unless it is set
already) and, while TensorFlow is first imported, sends descriptor 2 to a
temporary file, then replays every line of it that is not one of TensorFlow's
log lines. Nothing is hidden from the device list: a GPU stays visible.
Python exceptions, bertzoo's own errors and warnings are untouched.

`BERTZOO_TF_LOGS=1` in the environment turns all of this off (and reaches
the processes a run starts, since they inherit the environment).

The processes a quiet process starts (spawned preparation workers, the
export subprocess) are quiet too: `quiet_tensorflow` marks the environment
(`BERTZOO_QUIET_TF=1`), and `import bertzoo`, which comes first in such a
child, calls `on_import()`.

A user's own script is quiet the same way when it imports bertzoo before
TensorFlow (`on_import()`), unless the user chose TensorFlow's log level
themselves (`TF_CPP_MIN_LOG_LEVEL` set) or asked for the lines
(`BERTZOO_TF_LOGS=1`). Importing TensorFlow (or Keras on TensorFlow) first
leaves its banner as TensorFlow writes it: it is out by then.
"""

import importlib.util
import os
import re
import sys
import tempfile

ENV_VAR = "BERTZOO_TF_LOGS"
CHILD_VAR = "BERTZOO_QUIET_TF"  # set by a quiet process for the ones it starts
HELP = f"{ENV_VAR}=1 in the environment shows TensorFlow's own log lines (hidden by default)."

# TensorFlow's C++ log lines (absl format: severity letter, MMDD, time,
# thread, file:line]) and the two banner lines without that prefix.
_TF_LINE = re.compile(
    r"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\] "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: )"
)


def tf_logs_wanted():
    """Whether the user asked for TensorFlow's log lines (BERTZOO_TF_LOGS)."""
    return os.environ.get(ENV_VAR, "").strip().lower() not in ("", "0", "false", "no")


def is_tf_log_line(line):
    """Whether `line` is one of TensorFlow's C++ log or banner lines."""
    return _TF_LINE.match(line) is not None


def quiet_tensorflow():
    """Hides TensorFlow's log lines in this process (see the module
    docstring); call it before anything imports TensorFlow. Returns whether
    it did anything (False with BERTZOO_TF_LOGS=1)."""
    if tf_logs_wanted():
        return False
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ[CHILD_VAR] = "1"
    if "tensorflow" not in sys.modules and not any(
        isinstance(f, _QuietImport) for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _QuietImport())
    return True


def on_import():
    """What `import bertzoo` does (see the module docstring):
    `quiet_tensorflow()` in a process started by a quiet one, or where
    TensorFlow is not imported yet and `TF_CPP_MIN_LOG_LEVEL` is not set;
    nothing otherwise. Returns whether it quieted TensorFlow."""
    inherited = os.environ.get(CHILD_VAR) == "1"
    untouched = "tensorflow" not in sys.modules and "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    return (inherited or untouched) and quiet_tensorflow()


class _QuietImport:
    """A meta-path finder that wraps TensorFlow's first import (once)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader:
    """The original loader, its `exec_module` run with descriptor 2 filtered."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        with _filtered_stderr():
            self._loader.exec_module(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _filtered_stderr:
    """Descriptor 2 goes to a temporary file; on exit the lines that are not
    TensorFlow's are written back to it."""

    def __enter__(self):
        self._saved = None
        try:
            sys.stderr.flush()
            self._fd = sys.stderr.fileno() if sys.stderr is not None else 2
            self._saved = os.dup(self._fd)
            self._file = tempfile.TemporaryFile()
            os.dup2(self._file.fileno(), self._fd)
        except (OSError, ValueError, AttributeError):  # no real descriptor 2
            if self._saved is not None:
                os.close(self._saved)
            self._saved = None
        return self

    def __exit__(self, *exc):
        if self._saved is None:
            return False
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self._saved, self._fd)
        os.close(self._saved)
        self._file.seek(0)
        kept = [
            line
            for line in self._file.read().decode("utf-8", "replace").splitlines(keepends=True)
            if not is_tf_log_line(line)
        ]
        self._file.close()
        if kept:
            os.write(self._fd, "".join(kept).encode("utf-8"))
        return False
