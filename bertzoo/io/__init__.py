"""Floor 0 of bertzoo: files that are never lost and never silently wrong.

- `bertzoo.io.publish`: atomic files, and directories published as one unit
  with a checksum manifest written last (presets, checkpoints, exports).
- `bertzoo.io.manifest`: the manifest format and its verification.
- `bertzoo.io.snapshot`: reading one published version of a directory
  while new ones are published (`from_preset` never mixes two saves).
- `bertzoo.io.safetensors`: reading and writing safetensors files, checked
  by bertzoo and by the `safetensors` package.
- `bertzoo.io.bounded`: the one rule for every file read from a
  directory: a plain file within its stated cap, and counts within theirs,
  checked before anything is allocated (docs/files.md).
- `bertzoo.io.jsonfile`: reading a JSON file, bounded, with a one-line error.
- `bertzoo.io.textfiles`: text input files: paths and globs -> files
  (one-line errors), and their lines read in bounded memory (`.gz` too).
- `bertzoo.io.diskfull`: a full disk while writing: a one-line
  `DiskFullError`, HDF5 files left open by the failed write closed.
- `bertzoo.io.rundir`: a run's output directory: an exclusive lock, and a
  record of the files the run wrote (the only ones it may remove); the
  shared lock of a process reading it (training from a prepared corpus).
- `bertzoo.io.children`: spawned workers that end with their parent.
"""
