"""The ``logfs`` command line.

Rules:

- One click group, ``main``; each subcommand is one function below with a docstring that becomes its ``--help``.
- Exit codes: 0 success, 1 failure, 2 bad usage. Click gives 2 for usage errors by itself; a ``LogfsError`` or an
  ``OSError`` escaping a subcommand becomes one line on stderr and exit 1 (``_Group.invoke``), never a traceback:
  ``Error: <message>``, the message a user reads, without the exception's class. Run with ``--log-level debug`` to
  see the class and the traceback in the log.
- Logging goes to stderr, one line per event (a traceback is folded onto its event's line), so that a daemon's log
  can be grepped and a subcommand's stdout stays clean for its output.
- This module is the only one that configures logging; library modules only call ``logging.getLogger(__name__)``.
- Subcommands import what they need inside their function: ``logfs --help`` must not pay for numpy, pyfuse3 or
  pyspark.
"""

from __future__ import annotations

import logging
import os
import select
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from logfs import __version__
from logfs.cliadmin import ADMIN_COMMANDS
from logfs.core.errors import LogfsError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
assert click.ClickException.exit_code == EXIT_FAILURE
assert click.UsageError.exit_code == EXIT_USAGE

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_log = logging.getLogger(__name__)


class _OneLineFormatter(logging.Formatter):
    """Formats each event on one line: newlines in the message or its traceback become `` | ``."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n", " | ")


class _StderrHandler(logging.StreamHandler):
    """The handler ``configure_logging`` installs; its class marks it for replacement on the next call."""


def configure_logging(level: str) -> None:
    """Send log events at ``level`` and above to stderr, one line each. Calling it again replaces the handler.

    Main thread only, before any other thread logs.
    """
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter(LOG_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)


class _Group(click.Group):
    """A click group that turns expected failures into exit code 1 with a one-line message, gives every command the
    global ``--log-level`` too, and lets a closed stdout end a command quietly."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Every command also takes ``--log-level``: ``logfs mount S M --log-level info`` works as ``logfs
        --log-level info mount S M`` does (issue 23 item 8), the way a user adds an option to the end of the last
        command line. The command's value applies after the group's (click parses the command's options once the
        group's callback has run), so the later one on the line wins, as in argparse with parent parsers."""
        cmd.params.append(
            click.Option(
                ["--log-level"],
                type=click.Choice(LOG_LEVELS, case_sensitive=False),
                default=None,
                expose_value=False,
                callback=_log_level_after_command,
                help="As `logfs --log-level` before the command (either place works).",
            )
        )
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # `logfs dump … | head`: the reader is gone. Click's main then exits 1 without a word and keeps the
            # interpreter's last flush of stdout quiet, as coreutils end on SIGPIPE. An EPIPE from elsewhere (not
            # our stdout) stays an error with its message.
            if not _stdout_closed():
                raise click.ClickException("Broken pipe") from None
            raise
        except (LogfsError, OSError) as exc:
            _log.debug("command failed: %s: %s", type(exc).__name__, exc, exc_info=True)
            raise click.ClickException(_message(exc)) from exc


def _log_level_after_command(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        configure_logging(value)


def _stdout_closed() -> bool:
    """True when stdout is a pipe or socket whose reading end is closed (poll reports POLLERR on the write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _message(exc: Exception) -> str:
    """What a user reads about a failure: its message, without the exception's class (``--log-level debug`` logs
    that, with the traceback); an OSError as ``<file>: <strerror>``, as shell tools print it."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    return str(exc) or type(exc).__name__


_HELP = """\
logfs: Apache Kafka's log as a FUSE filesystem.

logfs keeps topic-partitions in Kafka's own on-disk format (segments of RecordBatch v2 with their offset and time
indexes), byte for byte, and mounts them as a filesystem: topics and partitions are directories, records are read
and appended through files. A follower daemon replicates a store; a Spark data source reads it.

Run `logfs COMMAND --help` for the options of one command.
"""

_EPILOG = """\
\b
Exit codes:
  0  success
  1  failure: bad or damaged data, an I/O error, a failed check
  2  bad usage: unknown command or option, bad argument
\b
Environment:
  LOGFS_LOG_LEVEL  default for --log-level
"""


@click.group(
    cls=_Group,
    help=_HELP,
    epilog=_EPILOG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)
@click.version_option(__version__, "-V", "--version", prog_name="logfs", message="%(prog)s %(version)s")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    envvar="LOGFS_LOG_LEVEL",
    help="Log events at this level and above to stderr, one line each.",
)
def main(log_level: str) -> None:
    configure_logging(log_level)


# --- subcommands --------------------------------------------------------------------------------------------------
# One function per subcommand; `logfs --help` lists them sorted by name.


@main.command()
def version() -> None:
    """Print the version of logfs and exit."""
    click.echo(f"logfs {__version__}")


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--records", is_flag=True, help="Also print every record of each batch (.log files).")
def dump(files: tuple[Path, ...], records: bool) -> None:
    """Print Kafka segment files as text: .log batch by batch, .index and .timeindex entry by entry.

    Each batch line gives its offsets, position, size, header fields and crc=ok or crc=invalid; a batch whose
    framing breaks a rule also shows invalid=<reason>, and a torn tail is reported where the scan stops. Exits 1
    when any damage was found.
    """
    from logfs.dump import DumpResult, dump_file

    result = DumpResult()
    for path in files:
        try:
            for line in dump_file(path, records=records, result=result):
                click.echo(line)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    if result.damaged:
        raise click.ClickException(f"damage found in {result.damaged} place(s)")


@main.command()
@click.argument("store", type=click.Path(file_okay=False, path_type=Path))
@click.option("--repair", is_flag=True, help="Recover the store (as a mount does after a crash) and close it cleanly.")
def check(store: Path, repair: bool) -> None:
    """Verify a store offline: every batch's CRC and framing, the indexes, the checkpoints.

    The store must not be mounted. Prints one line per finding; exits 1 when it finds damage. With --repair,
    damaged tails (and the segments after them) are moved into .quarantine files beside their segments, indexes
    are rebuilt, and the command exits 0. A progress line is shown on a terminal.
    """
    from logfs.core.check import check_store, repair_store

    progress = _progress_line("repairing" if repair else "checking") if sys.stderr.isatty() else None
    findings = repair_store(store, progress=progress) if repair else check_store(store, progress=progress)
    if progress is not None:
        click.echo("", err=True)
    for finding in findings:
        click.echo(str(finding))
    damage = [f for f in findings if f.damage]
    if damage and not repair:
        raise click.ClickException(f"{len(damage)} problem(s) found in {store}; `logfs check --repair` recovers it")
    click.echo(f"{store}: {'repaired' if repair else 'ok'} ({len(findings)} note(s))")


def _progress_line(verb: str) -> Callable[[int, int], None]:
    def show(done: int, total: int) -> None:
        pct = 100 * done // total if total else 100
        click.echo(f"\r{verb}: {pct:3d}% ({done / 1e6:,.1f} of {total / 1e6:,.1f} MB)", err=True, nl=False)

    return show


@main.command()
@click.argument("store", type=click.Path(file_okay=False, path_type=Path))
@click.argument("mountpoint", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--config",
    "config_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A store-wide default for this process (Kafka's names: num.partitions, segment.bytes …); repeatable.",
)
@click.option(
    "--allow-other",
    is_flag=True,
    help="Share the mount with other users: each topic shows and enforces its owner and mode (FUSE's allow_other; "
    "docs/mount.md, \"Sharing a mount\"). Sets mount.allow.other=true.",
)
@click.option(
    "--unclean",
    is_flag=True,
    help="Lead STORE even if it was out of the ISR when it last followed a leader (Kafka's unclean leader election: "
    "records the old leader acknowledged may be lost).",
)
def mount(store: Path, mountpoint: Path, config_pairs: tuple[str, ...], allow_other: bool, unclean: bool) -> None:
    """Serve STORE as a filesystem at MOUNTPOINT, in the foreground, until SIGINT, SIGTERM or `logfs umount`.

    STORE is the leader of every partition, in a new leader epoch; followers (`logfs follow`) fetch through
    MOUNTPOINT/.logfs/fetch/ when --config replica.ids lists them. With --config zookeeper.connect=HOST:PORT the
    node joins a cluster instead: ZooKeeper elects the leader, and the mount leads or follows in place
    (docs/replication.md, "Automatic failover"). Shuts down cleanly (flush, checkpoints,
    clean-shutdown marker, unmount) and exits 0. A stale mount left at MOUNTPOINT by a process that died is cleared
    first. STORE is created when missing, but only once the mount point is known to be usable. Exits 1 when the
    store is in use by another process, the mount point cannot be used (missing, not a directory, already a mount
    point), or STORE was out of the ISR at its last fetch as a follower (unless --unclean); 2 for a bad --config.
    """
    from logfs.core.configtext import parse_store_config
    from logfs.core.errors import ConfigError

    try:
        config = parse_store_config((*config_pairs, *(["mount.allow.other=true"] if allow_other else [])))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if config.zookeeper_connect and unclean:
        raise click.UsageError("with zookeeper.connect, use --config unclean.leader.election.enable=true")
    from logfs.mount.server import serve  # pyfuse3 and trio only for this command

    try:
        if config.zookeeper_connect:  # a node of a ZooKeeper cluster: elected, not started as leader
            from logfs.cluster.serve import serve_cluster

            code = serve_cluster(store, mountpoint, config)
        else:
            code = serve(store, mountpoint, config, unclean=unclean)
    except ConfigError as exc:  # a node.id the store refuses
        raise click.UsageError(str(exc)) from None
    sys.exit(code)


@main.command()
@click.argument("leader_mount", type=click.Path(file_okay=False, path_type=Path))
@click.argument("store", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--replica-id", type=click.IntRange(min=0), required=True, metavar="N", help="This follower's id (its node.id)."
)
@click.option(
    "--mount",
    "mountpoint",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also serve STORE read-only at this mount point (reads bounded by the follower's high watermark).",
)
@click.option(
    "--config",
    "config_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A store-wide setting for this process (as `logfs mount --config`); repeatable.",
)
@click.option(
    "--allow-other",
    is_flag=True,
    help="Share the mount with other users: each topic shows and enforces its owner and mode (FUSE's allow_other; "
    "docs/mount.md, \"Sharing a mount\"). Sets mount.allow.other=true.",
)
def follow(
    leader_mount: Path,
    store: Path,
    replica_id: int,
    mountpoint: Path | None,
    config_pairs: tuple[str, ...],
    allow_other: bool,
) -> None:
    """Replicate every topic and partition of the leader mounted at LEADER_MOUNT into STORE, as replica N.

    Reads only files of the leader's mount (its .logfs/fetch/ files; docs/replication.md), with Kafka's follower
    rules: offsets and epochs as the leader assigned them, segments rolled where the leader rolled, HW = min(leader
    HW, own LEO), the leader's log start offset, a divergent tail truncated by leader epochs. Resumes from STORE's
    end after a restart; retries with backoff while the leader is unreachable. Runs in the foreground until SIGINT,
    SIGTERM (or `logfs umount` of --mount), then closes STORE cleanly and exits 0. The leader must list N in its
    replica.ids. Exits 1 when STORE is in use, 2 for a bad --config or an N that STORE refuses (its node.id).
    """
    from logfs.core.configtext import parse_store_config
    from logfs.core.errors import ConfigError

    try:
        shared = ["mount.allow.other=true"] if allow_other else []
        config = parse_store_config((*config_pairs, *shared, f"node.id={replica_id}"))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if any(pair.partition("=")[0].strip() == "node.id" for pair in config_pairs):
        raise click.UsageError("--replica-id is this store's node.id: give it once, not as --config node.id")
    from logfs.follower.command import follow as run_follower  # trio (and pyfuse3 with --mount) only for this command

    try:
        code = run_follower(leader_mount, store, replica_id, config, mountpoint)
    except ConfigError as exc:  # a node.id the store refuses
        raise click.UsageError(str(exc)) from None
    sys.exit(code)


@main.command()
@click.argument("mountpoint", type=click.Path(file_okay=False, path_type=Path))
@click.option("--lazy", "-z", is_flag=True, help="Detach now even if files are open (fusermount3 -u -z).")
def umount(mountpoint: Path, lazy: bool) -> None:
    """Unmount a logfs mount (fusermount3 -u); its `logfs mount` process then shuts down cleanly and exits 0.

    While files under the mount are open (or a shell's working directory is inside it) the unmount fails with
    "Device or resource busy" and names the processes holding it, with their command lines (from /proc/*/fd, cwd
    and root, and the path system calls their threads wait in: `logfs follow` waits in open() of a fetch file).
    --lazy detaches the mount point at once: `follow/` readers then read end of file, and the `logfs mount` process
    shuts down cleanly once their files are closed (at most 10 s later, whatever else is still open).
    """
    from logfs.mount.fusermount import unmount
    from logfs.mount.holders import holders

    _check_mounted(mountpoint)
    done = unmount(mountpoint, lazy=lazy)
    if done.returncode != 0:
        message = done.stderr.strip() or f"fusermount3 -u {mountpoint} failed"
        if not lazy and ("busy" in message.lower() or "EBUSY" in message):
            found = holders(mountpoint)
            held = "".join(f"\n  {holder}" for holder in found if holder.certain)
            maybe = "".join(f"\n  {holder}" for holder in found if not holder.certain)
            if maybe:
                maybe = "\nperhaps also (this user may not trace them to tell which mount they wait on):" + maybe
            nobody = " (by no process of this user" + (" that it can tell)" if maybe else ")")
            message += (
                f"\nfiles under {mountpoint} are still open (or a process has its working directory there, or waits"
                f" in a system call on a path under it):{held or nobody}{maybe}"
                f"\nclose them, or `logfs umount --lazy {mountpoint}` to"
                " detach it now (follow/ readers then read end of file, and the mount shuts down cleanly)"
            )
        raise click.ClickException(message)


def _check_mounted(mountpoint: Path) -> None:
    """A clear message for a mount point with nothing mounted (fusermount3 says "Invalid argument" or "not found in
    /etc/mtab"). A stale mount (its process died: stat fails with ENOTCONN) is still unmounted."""
    try:
        os.stat(mountpoint)
    except FileNotFoundError:
        raise click.ClickException(f"{mountpoint} does not exist") from None
    except OSError:
        return  # stale: fusermount3 -u clears it
    if not os.path.ismount(mountpoint):
        raise click.ClickException(f"{mountpoint} is not mounted")


# The commands that administer a running mount or cluster: logfs/cliadmin.py.
for _command in ADMIN_COMMANDS:
    main.add_command(_command)
