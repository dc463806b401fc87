"""The ``logfs`` commands that administer a running mount or cluster, beside ``logfs/cli.py``'s (which registers
them on its group): ``create-topic``, ``delete-topic``, ``groups`` and ``errors`` act through a mount's own files
(``logfs/admin.py``, ``logfs/groups.py``); ``zk-acls`` sets a cluster's ZooKeeper ACLs (``logfs/cluster/zkacls.py``).
The rules of ``logfs/cli.py`` hold here too: exit 1 for a failure, 2 for bad usage, one line each; imports inside
each command, so that ``logfs --help`` stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

T = TypeVar("T")


# --- commands on a running mount (logfs/admin.py) -------------------------------------------------------------


def _admin(action: Callable[[], T]) -> T:
    """Run an admin action: BadArgument exits 2, AdminError 1, each with its one-line message."""
    from logfs.admin import AdminError, BadArgument

    try:
        return action()
    except BadArgument as exc:
        raise click.UsageError(str(exc)) from None
    except AdminError as exc:
        raise click.ClickException(str(exc)) from None


_MOUNT_ARG = click.Path(file_okay=False, path_type=Path)


@click.command("create-topic")
@click.argument("mountpoint", type=_MOUNT_ARG)
@click.argument("topic")
@click.option(
    "--partitions", type=click.IntRange(min=1), default=None, metavar="N",
    help="Partitions 0 … N-1 (default: the mount's num.partitions).",
)  # fmt: skip
@click.option(
    "--config", "config_lines", multiple=True, metavar="KEY=VALUE",
    help="A topic config override (retention.ms, cleanup.policy …; docs/config.md); repeatable.",
)  # fmt: skip
def create_topic(mountpoint: Path, topic: str, partitions: int | None, config_lines: tuple[str, ...]) -> None:
    """Create TOPIC with N partitions and config overrides in the mount at MOUNTPOINT.

    Does what `mkdir MOUNTPOINT/TOPIC`, `mkdir MOUNTPOINT/TOPIC/<p>` for each further partition and one write of
    the --config lines to MOUNTPOINT/TOPIC/config do. Whole or nothing: when a step fails the topic is removed again
    (rmdir: it holds no record yet) and nothing stays, unless another process wrote into it meanwhile (then the
    message says it was left). A mount's mkdir makes its num.partitions partitions at once and partitions cannot be
    removed, so N below that fails. Exits 1 when the topic exists, MOUNTPOINT is not a logfs mount or the mount
    refuses (a follower's mount is read-only); 2 for a bad --config line or a topic name outside Kafka's rules
    (1-249 characters of [A-Za-z0-9._-], not starting with '.'; nor one that differs from an existing topic's only
    in '.' against '_').
    """
    from logfs.admin import create_topic as create

    made = _admin(lambda: create(mountpoint, topic, partitions, list(config_lines)))
    click.echo(f"created topic {topic} with {made} partition(s)")


@click.command("delete-topic")
@click.argument("mountpoint", type=_MOUNT_ARG)
@click.argument("topic")
def delete_topic(mountpoint: Path, topic: str) -> None:
    """Delete TOPIC and all its records from the mount at MOUNTPOINT (writes TOPIC to .logfs/delete-topic).

    The records are gone for good: there is no undo. Readers of the topic see end of file. Exits 1 when there is no
    such topic, MOUNTPOINT is not a logfs mount or the mount refuses (a follower's mount is read-only); 2 for a topic
    name outside Kafka's rules.
    """
    from logfs.admin import delete_topic as delete

    _admin(lambda: delete(mountpoint, topic))
    click.echo(f"deleted topic {topic}")


@click.command()
@click.argument("mountpoint", type=_MOUNT_ARG)
@click.option("--group", default=None, metavar="GROUP", help="Only this consumer group.")
def groups(mountpoint: Path, group: str | None) -> None:
    """Print the consumer groups of the mount at MOUNTPOINT with their committed offsets and lag, as
    `kafka-consumer-groups --describe` does (from MOUNTPOINT/.logfs/groups/<group>/lag).

    LOG-END-OFFSET is the high watermark and LAG what remains to read up to it. Prints nothing when no group has
    committed. Exits 1 when MOUNTPOINT is not a logfs mount or --group names no group, 2 when GROUP breaks the
    name rules (1-249 characters of [A-Za-z0-9._-], not starting with '.').
    """
    from logfs.groups import describe, format_rows

    click.echo(format_rows(_admin(lambda: describe(mountpoint, group))), nl=False)


@click.command()
@click.argument("mountpoint", type=_MOUNT_ARG)
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON lines of .logfs/errors.")
def errors(mountpoint: Path, as_json: bool) -> None:
    """Print the last refusals of the mount at MOUNTPOINT, oldest first: why a write, an open for writing, a mkdir,
    an rmdir or a config change failed.

    One line each: local time, errno, what was refused, the path under the mount, and the reason. The mount keeps
    the last 100 (MOUNTPOINT/.logfs/errors, JSON lines with time, op, path, errno and reason) and logs each at
    WARNING too (rate-limited). Prints nothing when there were none. Exits 1 when MOUNTPOINT is not a logfs mount.
    """
    from logfs.admin import format_refusal, read_refusals, refusals_text

    if as_json:
        click.echo(_admin(lambda: refusals_text(mountpoint)), nl=False)
        return
    for refusal in _admin(lambda: read_refusals(mountpoint)):
        click.echo(format_refusal(refusal))


@click.command("zk-acls")
@click.option("--zookeeper", "--zookeeper.connect", "connect", required=True, metavar="HOST:PORT[,…][/chroot]",
              help="The cluster's zookeeper.connect.")  # fmt: skip
@click.option("--auth-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="The nodes' zookeeper.auth.file, whose credential changes the znodes.")  # fmt: skip
@click.option("--secure/--unsecure", default=None, help="The secure ACL (anyone reads, only the credential changes) "
              "or ZooKeeper's open one.")  # fmt: skip
@click.option("--zookeeper.acl", "acl", type=click.Choice(["secure", "unsecure"]), help="Kafka's spelling of those.")
def zk_acls(connect: str, auth_file: Path | None, secure: bool | None, acl: str | None) -> None:
    """Set the ACL of every znode the logfs cluster at --zookeeper uses (its chroot and everything under /brokers,
    /admin, /logfs, /controller, /controller_epoch), as Kafka's zookeeper-security-migration does.

    Secure a cluster after restarting every node with zookeeper.auth.file and zookeeper.set.acl=true; unsecure it
    after restarting them with zookeeper.set.acl=false (docs/replication.md, "Securing ZooKeeper and followers").
    Exits 1 when ZooKeeper does not answer or refuses a change (a znode secured with another credential), 2 for bad
    usage or a bad --auth-file.
    """
    from logfs.cluster.zkacls import migrate, wanted  # kazoo only for this command
    from logfs.cluster.zkerrors import NotAuthorized, ZkUnavailable
    from logfs.core.errors import ConfigError

    try:
        done = migrate(connect, auth_file, secure=wanted(secure, acl, auth_file))
    except ConfigError as exc:  # the flags, or the credential file
        raise click.UsageError(str(exc)) from None
    except ZkUnavailable as exc:
        fix = "; give --auth-file the credential it was secured with" if isinstance(exc, NotAuthorized) else ""
        raise click.ClickException(f"{exc}{fix}") from None
    click.echo(f"{connect}: {done.znodes} znode(s) now have the ACL {done.acl}")
    if done.warning:
        click.echo(f"warning: {done.warning}", err=True)


ADMIN_COMMANDS: tuple[click.Command, ...] = (create_topic, delete_topic, groups, errors, zk_acls)
