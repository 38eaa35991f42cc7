"""Writing files so that nothing already on disk is lost: `atomic_write` writes beside the target
(``.NAME.tmp-PID``, same filesystem), syncs and renames over it, so a reader sees the old file or the new
one and a failed write (a full disk, a killed process) leaves the old file as it was; `remove_orphans`
deletes what killed writers left. No command replaces a file it did not create unless told to
(`check_output_file`). No torch here: the commands that only draw a picture import this without it."""

from __future__ import annotations

import csv
import errno
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from mixer_lightning.errors import ConfigError, ResourceError

_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")


def temporary_path(target: Path) -> Path:
    """Where `atomic_write` stages `target`: ``.NAME.tmp-PID`` in the same folder."""
    return target.with_name(f".{target.name}.tmp-{os.getpid()}")


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_write(target: str | Path, mode: str = "wb", field: str = "output") -> Iterator[IO[Any]]:
    """A file object whose content replaces `target` atomically when the block ends without an error; a
    full disk is a `ResourceError` on `field`, and `target` is left as it was."""
    target = Path(target)
    temporary = temporary_path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ResourceError(
                field, f"no space left on the device to write {str(target)!r}", "free some space"
            ) from None
        if error.filename == str(temporary):  # name the file asked for, not our staging name
            raise OSError(error.errno, error.strerror, str(target)) from None
        raise
    finally:
        if temporary.is_file():
            temporary.unlink()
    fsync_directory(target.parent)


def write_text(target: str | Path, text: str, field: str = "output") -> None:
    """`text` (UTF-8) to `target`, atomically."""
    with atomic_write(target, "w", field) as f:
        f.write(text)


def write_csv(target: str | Path, table: list[dict], field: str = "out") -> None:
    """The rows `table` as CSV at `target`, atomically; the columns in the order they first appear."""
    fields = list(dict.fromkeys(key for row in table for key in row))
    with atomic_write(target, "w", field) as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(table)


def pyplot() -> Any:
    """matplotlib's pyplot drawing into files only (no display: a batch job, a server)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, target: str | Path, field: str = "plot", dpi: int = 120) -> None:
    """A matplotlib figure as a PNG at `target`, atomically, then closed."""
    import matplotlib.pyplot as plt

    try:
        with atomic_write(target, "wb", field) as f:
            fig.savefig(f, format="png", dpi=dpi)
    finally:
        plt.close(fig)


def check_output_file(path: str | Path, field: str, overwrite: bool = False, flag: str = "--overwrite") -> Path:
    """Before any work: the file `path` is not a folder, and does not exist unless `overwrite` (`flag`)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(field, f"{str(path)!r} is a folder", "give the path of a file")
    if path.exists() and not path.is_file():  # a device or a FIFO: the atomic rename would replace the node itself
        raise ConfigError(field, f"{str(path)!r} is no regular file", "give the path of a file")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise ConfigError(field, f"{str(path)!r} exists", f"pass {flag} or choose another path")
    return path


def check_output_dir(path: str | Path, field: str, what: str = "the output files") -> Path:
    """Before any work: `path` is a folder, or can be made one, for `what`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(field, f"{str(path)!r} is a file, not a folder", f"give a folder for {what}")
    return path


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return pid > 0


def remove_orphans(directory: str | Path, only: str | None = None) -> list[Path]:
    """Delete the ``.NAME.tmp-PID`` files in `directory` whose writer is gone (with `only`, those of the file
    named `only`: in a user's folder, another tool's look-alikes are not ours to delete); return them."""
    removed: list[Path] = []
    directory = Path(directory)
    for entry in directory.iterdir() if directory.is_dir() else ():
        found = _TEMPORARY.match(entry.name)
        if not found or (only is not None and found["name"] != only) or not entry.is_file():
            continue
        if int(found["pid"]) != os.getpid() and not pid_alive(int(found["pid"])):
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def sha256_file(path: str | Path) -> str:
    """The sha256 of the file at `path`, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
