"""Writing files so that nothing already on disk is lost: every file the project writes goes through
`atomic_write`, and every output path a user gives is checked first (`check_output_file`,
`check_output_dir`).

`atomic_write` writes to a temporary file beside the target (``.NAME.tmp-PID``, same filesystem),
flushes it to disk and renames it over the target: a reader sees the old file or the new one, never
half of either, and a write that fails (a full disk, a killed process) leaves the old file as it
was. A process killed mid-write leaves its ``.NAME.tmp-PID``; `remove_orphans` deletes those of
processes that are gone (`mixer fit` does, in its run directory, before it writes there).

No command replaces a file it did not create unless told to: an existing output file is an error
naming the flag that allows it (``--overwrite``), checked before any work is done. No torch or
Lightning here: the commands that write only a picture import this without them.
"""

from __future__ import annotations

import csv
import errno
import os
import re
import stat
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
    """Make a rename in `directory` durable (a no-op where folders cannot be opened, e.g. Windows)."""
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


def write_error(target: Path, error: OSError, field: str) -> Exception:
    """A one-line error for an `OSError` met while writing `target` (the old file is untouched)."""
    reason = error.strerror or type(error).__name__
    kept = f"{str(target)!r} is unchanged" if target.exists() else "nothing was written"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceError(
            field,
            f"cannot write {str(target)!r}: no space left on the device; {kept}",
            "free some space and run the command again",
        )
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ConfigError(field, f"cannot write {str(target)!r}: {reason.lower()}", "choose a path you can write to")
    return ResourceError(field, f"cannot write {str(target)!r}: {reason}; {kept}")


def special_kind(path: str | Path) -> str | None:
    """What `path` is when it exists and is neither a regular file, a folder nor a symbolic link (a
    FIFO, a device, a socket: `os.replace` would put a regular file in its place); None otherwise."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    kinds = (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    )
    return next((kind for test, kind in kinds if test(mode)), None)


def refuse_special(path: Path, field: str) -> None:
    """A `ConfigError` when `path` is a FIFO, a device or a socket: writing a file there would replace it
    (as root, ``--out /dev/null --overwrite`` would replace the system's /dev/null)."""
    kind = special_kind(path) or (special_kind(path.resolve()) if path.is_symlink() else None)
    if kind is not None:
        raise ConfigError(
            field,
            f"{str(path)!r} is a {kind} (not a regular file); it is not replaced",
            "give the path of a regular file",
        )


@contextmanager
def atomic_write(target: str | Path, mode: str = "wb", field: str = "output") -> Iterator[IO[Any]]:
    """A file object whose content replaces `target` atomically when the block ends without an error.

    On any error the temporary file is removed and `target` is left as it was; an `OSError` (a full
    disk, no permission) becomes a one-line `ResourceError`/`ConfigError` on `field`."""
    target = Path(target)
    temporary = temporary_path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        refuse_special(target, field)  # a backstop for writers that skip `check_output_file`
        os.replace(temporary, target)  # atomic on POSIX: readers see the old file or the new one
    except OSError as error:
        raise write_error(target, error, field) from None
    finally:
        temporary.unlink(missing_ok=True)
    fsync_directory(target.parent)


def write_text(target: str | Path, text: str, field: str = "output") -> None:
    """`text` (UTF-8) to `target`, atomically."""
    with atomic_write(target, "w", field) as f:
        f.write(text)


def write_csv(target: str | Path, table: list[dict], field: str = "out") -> None:
    """The rows `table` as CSV at `target`, atomically; the columns in the order they first appear."""
    fields: list[str] = []
    for row in table:
        fields += [k for k in row if k not in fields]
    with atomic_write(target, "w", field) as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(table)


def pyplot() -> Any:
    """matplotlib's pyplot drawing into files only (no display needed: a batch job, a server)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, target: str | Path, field: str = "plot", dpi: int = 120) -> None:
    """A matplotlib figure as a PNG at `target`, atomically, then closed (every picture a command draws)."""
    import matplotlib.pyplot as plt

    try:
        with atomic_write(target, "wb", field) as f:
            fig.savefig(f, format="png", dpi=dpi)
    finally:
        plt.close(fig)


def _first_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_parent(path: Path, field: str) -> None:
    """`path`'s folder exists or can be made, and can be written in."""
    ancestor = _first_existing(path.absolute().parent)
    if not ancestor.is_dir():
        raise ConfigError(
            field,
            f"cannot write {str(path)!r}: {str(ancestor)!r} is a file, not a folder",
            "choose a path inside a folder",
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(
            field,
            f"cannot write {str(path)!r}: no permission to write in {str(ancestor)!r}",
            "choose a path you can write to",
        )


def check_output_file(path: str | Path, field: str, overwrite: bool = False, flag: str = "--overwrite") -> Path:
    """Check, before any work, that the file `path` can be written: its folder is a folder we may write
    in, it is not a folder itself, and it does not exist unless `overwrite` (the user's `flag`)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(field, f"{str(path)!r} is a folder", "give the path of a file")
    refuse_special(path, field)
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise ConfigError(field, f"{path} exists", f"pass {flag} or choose another path")
        if not os.access(path, os.W_OK) and not os.access(path.absolute().parent, os.W_OK):
            raise ConfigError(field, f"cannot replace {str(path)!r}: permission denied", "choose another path")
    _check_parent(path, field)
    return path


# Endings of files, not folders: `visualize --out pic.png` is a mistake, not a folder named pic.png.
FILE_SUFFIXES = (
    ".png",
    ".jpg",
    ".jpeg",
    ".pdf",
    ".svg",
    ".eps",
    ".gif",
    ".tif",
    ".tiff",
    ".bmp",
    ".webp",
    ".ckpt",
    ".pt",
    ".pth",
    ".npz",
    ".json",
    ".yaml",
    ".yml",
    ".csv",
    ".txt",
)


def check_output_dir(path: str | Path, field: str, what: str = "the output files") -> Path:
    """Check, before any work, that `path` is (or can be made) a folder we may write `what` into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(field, f"{str(path)!r} is a file, not a folder", f"give a folder for {what}")
    if not path.exists() and path.suffix.lower() in FILE_SUFFIXES:
        raise ConfigError(
            field,
            f"{str(path)!r} names a file, but {field} is the folder {what} are written into",
            f"give a folder, e.g. {str(path.with_suffix(''))!r}",
        )
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(field, f"cannot write in {str(path)!r}: permission denied", "choose another folder")
    else:
        _check_parent(path / "x", field)
    return path


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def process_started(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), from /proc; None where that is unknown (not
    Linux, no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
        )
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime: counted after the command's ")"
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def holder_alive(pid: int, since: float | None) -> bool:
    """Whether the process that wrote a lock file (``PID HOST TIME``) at `since` still runs on this machine:
    `pid` exists and started before `since`. A process that started later was given the PID again after the
    holder ended (PIDs wrap, and a renewed machine starts counting again): it holds nothing."""
    if not pid_alive(pid):
        return False
    started = process_started(pid) if since is not None else None
    return started is None or started <= since + 2  # the lock's whole seconds, and /proc's boot time's


def remove_orphans(directory: str | Path, only: str | None = None) -> list[Path]:
    """Delete the ``.NAME.tmp-PID`` files in `directory` whose process is gone (a write killed midway);
    return them. With `only`, just those of the file named `only`: in a user's folder (``mixer export
    --out``, ``mixer convert --out``) another tool's files that look alike are not ours to delete."""
    removed: list[Path] = []
    directory = Path(directory)
    if not directory.is_dir():
        return removed
    for entry in directory.iterdir():
        found = _TEMPORARY.match(entry.name)
        if found and only is not None and found["name"] != only:
            continue
        if found and entry.is_file() and int(found["pid"]) != os.getpid() and not pid_alive(int(found["pid"])):
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def sha256_file(path: str | Path) -> str:
    """The sha256 of the file at `path`, read in 1 MiB blocks (hashlib.file_digest needs Python 3.11)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
