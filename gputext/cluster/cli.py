"""`gputext cluster`: star (OClustR/DClustR), stream (ELLPACK single pass), eval."""
import click

from gputext.cli_common import LazyGroup, add_optional_commands

# (module, attribute names) added to the cluster group when their module exists
COMMANDS = [
    ("gputext.cluster.star_cli", ("star",)),
    ("gputext.cluster.stream_cli", ("stream",)),
    ("gputext.cluster.eval_cli", ("eval_",)),
]


@click.group(cls=LazyGroup)
def cluster():
    """Cluster documents: overlapping star clustering, stream clustering, and evaluation.

    \b
    Example:
      gputext cluster star corpus.h5 --beta 0.25 -o clusters.h5
    """


add_optional_commands(cluster, COMMANDS)
