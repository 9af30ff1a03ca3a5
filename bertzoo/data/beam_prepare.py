"""`prepare_corpus` on an Apache Beam runner (DirectRunner here; Dataflow,
Flink or Spark on a cluster). Needs apache-beam (`pip install ".[beam]"` in the bertzoo checkout).

    from bertzoo.data.beam_prepare import prepare_corpus_beam
    prepare_corpus_beam(["/data/wiki/*.txt"], tokenizer, "/mnt/corpus/prepared",
                        PrepareSettings(shard_bytes=64 << 20),
                        ["--runner=DataflowRunner", "--project=P", "--region=R", ...])

Everything but the pieces' preparation is `bertzoo.data.prepare`'s
(`run_preparation`): this process checks the inputs and the output, plans
the pieces, keeps the pieces the journal says are finished, and at the end
writes `prepared.json`, the vocabulary and the manifest. In between, a Beam
pipeline with one element per piece left (reshuffled, so that a runner
spreads them over its workers) runs `prepare_worker.prepare_piece` on each:
the same code as the local pool, so the shards and `prepared.json` are
byte-identical to `prepare_corpus`'s for the same inputs, settings and
tokenizer (input paths are made absolute first: they are recorded in the
shards' headers, so a run given relative paths matches `prepare_corpus`
given the absolute ones). The tokenizer travels once, inside the DoFn, and
is built once per worker process (in `setup`).

A worker writes its piece's shards straight into the output directory and
then a record of the piece (`.prepare-piece-NAME.json`); this process takes
the records into the journal once the pipeline is done, or, after a pipeline
that failed part way, when the preparation is run again: finished pieces are
then kept, as with `prepare_corpus`. A piece that a runner retries or runs
twice is written again with the same bytes.

What it needs and what it does not do:
- The input files and the output directory are read and written through
  the local filesystem, by this process and by every worker, at the same
  paths: on DirectRunner any local path; on a cluster a shared or mounted
  one (NFS, a bucket mounted with gcsfuse or similar at the same path
  everywhere). `gs://` or other URLs are refused: Beam's filesystems are
  not used.
- Progress is the runner's (its UI or logs); `settings.workers` is not
  used: the runner's options decide the parallelism (DirectRunner:
  `--direct_num_workers`, `--direct_running_mode`).
- Workers need bertzoo and its dependencies installed (Dataflow: a custom
  container, or `--extra_package` with a bertzoo wheel; `--setup_file`
  wants a setup.py, which bertzoo does not have). docs/scale-out.md has the
  commands for DirectRunner, Dataflow, Flink and Spark.
"""

import logging
import os

from bertzoo.data.corpus import CorpusError
from bertzoo.data.prepare import (
    read_piece_record,
    run_preparation,
    write_piece_record,
)
from bertzoo.data.prepare_worker import build_tokenizer, init_worker, prepare_piece
from bertzoo.errors import BertzooError

logger = logging.getLogger("bertzoo.data")


class BeamMissingError(BertzooError, ImportError):
    """Apache Beam is not installed."""


class BeamOptionError(BertzooError, ValueError):
    """A pipeline option is unknown or malformed."""


def import_beam():
    """-> the `apache_beam` module, or a one-line `BeamMissingError`."""
    try:
        import apache_beam
    except ImportError:
        raise BeamMissingError(
            'Preparing with Apache Beam needs apache-beam: pip install apache-beam, or pip install ".[beam]" '
            "in the bertzoo checkout (or the local pool: --engine local, the default)."
        ) from None
    return apache_beam


def pipeline_options(options=None):
    """None (DirectRunner), a list of command-line flags
    (["--runner=DataflowRunner", "--project=P"]), a dict ({"runner":
    "DirectRunner"}) or a `PipelineOptions` -> `PipelineOptions`; options
    no Beam runner knows (a typo would otherwise run somewhere else
    silently) are a `BeamOptionError`."""
    import_beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    if isinstance(options, PipelineOptions):
        return options
    if isinstance(options, dict):
        options = [f"--{k}={v}" for k, v in options.items()]
    flags = [str(f) for f in (options or [])]
    bad = [f for f in flags if not f.startswith("--")]
    if bad:
        raise BeamOptionError(
            f"Beam pipeline options are flags such as --runner=DirectRunner; got {bad[0]!r}."
        )
    result = PipelineOptions(flags)
    known = result.get_all_options()
    unknown = sorted(set(result.get_all_options(retain_unknown_options=True)) - set(known))
    if unknown:
        raise BeamOptionError(
            f"Unknown Beam pipeline option(s): {', '.join(unknown)}; see the runner's options "
            "(python -m apache_beam.examples.wordcount --help lists them)."
        )
    return result


def _prepare_fn(beam):
    """The DoFn class (defined here: apache_beam is imported only when used)."""

    class PreparePieces(beam.DoFn):
        """One piece -> its shards and its record in `output`."""

        def __init__(self, spec, settings, output):
            self.spec, self.settings, self.output = spec, settings, output

        def setup(self):
            init_worker(None)  # no progress counter: the runner reports progress
            build_tokenizer(self.spec)  # once per process; prepare_piece finds it built

        def process(self, element):
            piece, key = element
            entry = prepare_piece((piece, self.spec, self.settings, self.output))
            write_piece_record(self.output, piece.name, {**entry, "key": key})
            yield piece.name

    return PreparePieces


def _beam_engine(options):
    def run(work, on_done):
        beam = import_beam()
        elements = [(p, work.keys[p.name]) for p in work.todo]
        runner = options.get_all_options()["runner"] or "DirectRunner"
        logger.info("Preparing %d pieces with Beam (%s).", len(elements), runner)
        pipeline = beam.Pipeline(options=options)
        _ = (
            pipeline
            | "Pieces" >> beam.Create(elements, reshuffle=False)
            | "Spread" >> beam.Reshuffle()
            | "Prepare" >> beam.ParDo(_prepare_fn(beam)(work.spec, work.settings, str(work.output)))
        )
        state = pipeline.run().wait_until_finish()
        if state not in (None, "DONE"):  # a failed run raises; a cancelled one returns
            raise CorpusError(
                f"The Beam pipeline ended {state}; run again to continue (finished pieces are kept)."
            )
        missing = []
        for piece in work.todo:
            record = read_piece_record(work.output, piece.name)
            if isinstance(record, dict) and record.get("key") == work.keys[piece.name]:
                on_done(piece, record)
            else:
                missing.append(piece.name)
        if missing:
            raise CorpusError(
                f"The Beam pipeline finished, but {len(missing)} of {len(elements)} pieces "
                f"({missing[0]}, ...) left no record in {work.output}: the workers must write "
                "to the same directory this process reads (a shared or mounted filesystem on "
                "a cluster). Run again to prepare the missing pieces."
            )

    return run


def _local_path(path, what):
    if "://" in str(path):
        raise CorpusError(
            f"{what} {path} is a URL; Beam preparation reads and writes through the local "
            "filesystem: give a path every worker sees (e.g. a bucket mounted at the same path)."
        )
    return os.path.abspath(path)


def prepare_corpus_beam(inputs, tokenizer, output, settings=None, options=None):
    """`prepare_corpus` with its pieces prepared by a Beam pipeline (see the
    module docstring); `options` as `pipeline_options` takes them (None:
    DirectRunner in this process). Returns the `prepared.json` document."""
    options = pipeline_options(options)
    if isinstance(inputs, str | os.PathLike):
        inputs = [inputs]
    inputs = [_local_path(i, "Input") for i in inputs]
    output = _local_path(output, "--output")
    return run_preparation(inputs, tokenizer, output, settings, _beam_engine(options))
