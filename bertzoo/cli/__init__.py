"""Command line: `python -m bertzoo presets | demo | train-vocab | convert-google | export |
verify | fill-mask | attention | plan | prepare | prepare-records | data-service`.

One module per group of commands, each adding its subcommands to the parser
and running them; this module builds the parser and dispatches."""

import argparse

from bertzoo import quiet
from bertzoo.cli.convert import add_convert_google, convert_google
from bertzoo.cli.corpus import (
    add_prepare,
    add_prepare_records,
    prepare_command,
    prepare_records_command,
)
from bertzoo.cli.data_service import add_data_service, data_service_command
from bertzoo.cli.models import (
    add_export,
    add_model_commands,
    attention_command,
    demo_command,
    export,
    fill_mask_command,
    presets_table,
    verify,
)
from bertzoo.cli.plan import add_plan, plan_command
from bertzoo.cli.vocab import add_train_vocab, train_vocab

__all__ = ["main", "presets_table"]

# command -> what runs it (args -> exit status)
COMMANDS = {
    "presets": lambda args: print(presets_table()),
    "demo": demo_command,
    "convert-google": convert_google,
    "train-vocab": train_vocab,
    "export": export,
    "verify": lambda args: verify(args.directory),
    "fill-mask": fill_mask_command,
    "attention": attention_command,
    "plan": plan_command,
    "prepare": prepare_command,
    "prepare-records": prepare_records_command,
    "data-service": data_service_command,
}


def build_parser():
    """The parser of every command."""
    parser = argparse.ArgumentParser(
        prog="python -m bertzoo", description=__doc__.split("\n\n")[0], epilog=quiet.HELP
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_model_commands(sub)
    add_train_vocab(sub)
    add_convert_google(sub)
    add_export(sub)
    add_plan(sub)
    add_prepare(sub)
    add_prepare_records(sub)
    add_data_service(sub)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    status = COMMANDS[args.command](args)
    return 0 if status is None else status
