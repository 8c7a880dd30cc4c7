"""`gputext knn`: index, search (engine), classify and metafeatures (classify_cli)."""
import click

from gputext.cli_common import LazyGroup, add_optional_commands

# (module, attribute names) added to the knn group when their module exists
COMMANDS = [
    ("gputext.knn.search_cli", ("index", "search")),
    ("gputext.knn.classify_cli", ("classify", "metafeatures")),
]


@click.group(cls=LazyGroup)
def knn():
    """Exact k-nearest-neighbour search, classification and meta-features.

    \b
    Example:
      gputext knn search --index train.h5 --queries test.h5 -k 30 -o neighbours.h5
    """


add_optional_commands(knn, COMMANDS)
