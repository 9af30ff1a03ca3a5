"""Floor 0 of bertzoo: files that are never lost and never silently wrong.

- `bertzoo.io.publish`: atomic files, and directories published as one unit
  with a checksum manifest written last (presets, checkpoints, exports).
- `bertzoo.io.manifest`: the manifest format and its verification.
- `bertzoo.io.snapshot`: reading one published version of a directory
  while new ones are published (`from_preset` never mixes two saves).
- `bertzoo.io.safetensors`: reading and writing safetensors files, checked
  by bertzoo and by the `safetensors` package.
- `bertzoo.io.jsonfile`: reading a JSON object file with a one-line error.
- `bertzoo.io.textfiles`: text input files: paths and globs -> files
  (one-line errors), and their lines read in bounded memory (`.gz` too).
- `bertzoo.io.diskfull`: a full disk while writing: a one-line
  `DiskFullError`, HDF5 files left open by the failed write closed.
- `bertzoo.io.rundir`: a run's output directory: an exclusive lock, and a
  record of the files the run wrote (the only ones it may remove).
"""
