"""`gputext corpus`: build, info, split (gputext.io.commands) and synth (gputext.datasets.commands)."""
import click

from gputext.cli_common import LazyGroup, add_optional_commands

# (module, attribute names): commands added to the corpus group when their module exists
COMMANDS = [
    ("gputext.io.commands", ("build", "info", "split", "validate", "export")),
    ("gputext.datasets.commands", ("synth",)),
]


@click.group(cls=LazyGroup)
def corpus():
    """Make and inspect corpus files: build from text formats, info, validate, split, synth, export.

    \b
    Example:
      gputext corpus build train.tab -o train.h5
      gputext corpus info train.h5
    """


add_optional_commands(corpus, COMMANDS)
