"""Reading inputs safely, and writing a file whole or not at all.

Reading (`read_input`): every file the tools read (topologies, arrival patterns, schedules,
a benchmark page or sweep cache about to be updated) is opened without blocking and
checked with fstat before a byte is read: only a regular file is read (a FIFO would block
forever, /dev/zero never ends, a directory or socket is not a file), and at most `limit`
bytes (MAX_INPUT_BYTES by default) - a larger file is refused before it is read.

Writing (`write_atomic`, `replacing`): every file the tools write (schedules, topologies,
arrival patterns, JSON results, benchmark pages, plots, the lab's platforms and caches) goes
first to a temporary name beside its target and is renamed over it only once complete: an
error, a full disk or an interrupt leaves the old file as it was and no temporary behind.

- Only a regular file (or a new name) is replaced: a device, FIFO, socket or directory at
  the target is refused (`OutputError`), never replaced by a regular file.
- A symbolic link is followed: the file it points to is replaced (the temporary is created
  beside that file, in its directory), and the link stays a link. A dangling link is refused.
- A replaced file keeps its permission bits and (where the process may: as root, or a group
  of its own) its owner and group.
- A hard-linked file is replaced by a new file (inode): the name written to gets the new
  content, the file's other names keep the old content (docs/inputs.md, "Output files").

The temporary is created exclusively, named by the process (a crashed run's or another
thread's leftover makes it take the next name), with the mode of any new file: 0666
less the umask. (tempfile.mkstemp's 0600 would leave a schedule, or a regenerated
docs/benchmarks.md, unreadable to other users; its random names also cost more than a
small schedule's write.)

`check_output_path(path, option)` runs the same checks up front (and tries to create the
temporary), and `check_input_path` the type check of read_input (stat only); the command line
calls `check_path_options(args)` once, so that a FIFO --topology or a bad -o is refused,
naming the option, before a long computation.
"""
from __future__ import annotations

import errno
import itertools
import os
import stat
from contextlib import contextmanager
from pathlib import Path

from .errors import InputError, OutputError

# Largest input file read (topology, arrival pattern): far above any real one (a measured
# 255-host matrix, the most schemas.MAX_NODES allows, is about 2 MB), far below what would
# exhaust memory.
MAX_INPUT_BYTES = 64 << 20


def file_kind(mode: int) -> str:
    """'a FIFO', 'a directory', ... for messages."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "a special file"


def _size_text(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 and n else f"{n:,} bytes"


def read_input(path, what: str, limit: int = MAX_INPUT_BYTES) -> bytearray:
    """The bytes of the regular file `path` (a `what`: 'topology', 'schedule', ...).

    InputError (one line: the path, what was expected) for a missing or unreadable file,
    anything but a regular file, or a file of more than `limit` bytes. Never blocks on a
    FIFO and never reads more than limit + 1 bytes.
    """
    source = str(path)
    if source == "":
        raise InputError("''", "", f"expected the name of a {what} file")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(source, "", f"cannot read file: not found (expected a {what} file)") from None
    except OSError as e:
        kind = ""
        try:  # a socket cannot be opened (ENXIO): say what it is
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):
                kind = file_kind(mode)
        except OSError:
            pass
        if kind:
            raise InputError(source, "", f"expected a regular {what} file, found {kind}") from None
        raise InputError(source, "", f"cannot read file ({e.strerror}; expected a {what} file)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(source, "", f"expected a regular {what} file, "
                                         f"found {file_kind(st.st_mode)}")
        if st.st_size > limit:
            raise InputError(source, "", f"{what} file too large: {_size_text(st.st_size)}, "
                                         f"at most {_size_text(limit)} are read")
        # Read into one buffer of the file's size (no second copy of a large schedule), one
        # byte more to see a file that grew since fstat; never past limit + 1 bytes.
        buf, n = bytearray(st.st_size + 1), 0
        with open(fd, "rb", buffering=0, closefd=False) as f:
            while True:
                if n == len(buf):
                    if n > limit:
                        raise InputError(source, "", f"{what} file too large: more than "
                                                     f"{_size_text(limit)}, at most that is read")
                    buf.extend(bytes(min(max(n, 1 << 16), limit + 1 - n)))
                k = f.readinto(memoryview(buf)[n:])
                if not k:
                    break
                n += k
        del buf[n:]
        return buf
    except OSError as e:
        raise InputError(source, "", f"cannot read file ({e.strerror}; expected a {what} file)") from None
    finally:
        os.close(fd)


# --- writing -------------------------------------------------------------------------------

def _target(path, option: str | None) -> tuple[Path, os.stat_result | None]:
    """The file to replace (a symlink resolved) and its stat, or None for a new file;
    OutputError for a target that is not a regular file."""
    text = os.fspath(path)
    source = option or text
    field = text if option else ""

    def bad(expected: str, err=None) -> OutputError:
        return OutputError(source, field, expected, err)

    if text == "":
        raise bad("expected a file name, got an empty string")
    if text.endswith(os.sep) or os.path.basename(text) in ("", ".", ".."):
        raise bad("expected a file name, got a directory")
    path = Path(text)
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        lst = None
    except OSError as e:  # ENOTDIR (a component is a file), EACCES, ELOOP, ENAMETOOLONG
        raise bad(f"cannot write there ({e.strerror})", e.errno) from None
    if lst is not None and stat.S_ISLNK(lst.st_mode):
        real = Path(os.path.realpath(path))
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise bad(f"is a symbolic link to a missing file ({real}); expected a regular "
                      f"file or a new name") from None
        except OSError as e:
            raise bad(f"cannot write there ({e.strerror})", e.errno) from None
        path, lst = real, st
    if lst is not None and not stat.S_ISREG(lst.st_mode):
        raise bad(f"is {file_kind(lst.st_mode)}; expected a regular file to replace, "
                  f"or a new name")
    parent = path.parent
    if not parent.is_dir():
        raise bad(f"directory {str(parent)!r} does not exist; expected a file in an "
                  f"existing directory")
    return path, lst


def _create_temp(path: Path, option: str | None = None) -> tuple[int, Path]:
    for attempt in itertools.count():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{attempt}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                           0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:  # EACCES, EROFS, ENOSPC, /proc ...
            raise OutputError(option or str(path), str(path) if option else "",
                              f"cannot create a file in {str(path.parent)!r} ({e.strerror})",
                              e.errno) from None


def check_output_path(path, option: str) -> Path:
    """Refuse, before any work, an output the writer would refuse: an empty name, a
    directory, a device/FIFO/socket, a dangling link, a missing or unwritable directory.
    Creates and removes a temporary beside the target (the only sure test of "can write
    here"). Returns the file that will be replaced (a symlink resolved)."""
    target, _ = _target(path, option)
    fd, tmp = _create_temp(target, option)
    os.close(fd)
    tmp.unlink(missing_ok=True)
    return target


# The command line's output options (argparse attribute, option): files it writes, and
# the run directory bench --keep fills. (A flag such as compile --json is not a path.)
OUTPUT_OPTIONS = (("output", "-o"), ("plot", "--plot"), ("doc", "--doc"), ("raw", "--raw"),
                  ("json", "--json"))
OUTPUT_DIR_OPTIONS = (("keep", "--keep"),)


def check_output_options(args) -> None:
    """check_output_path / check_output_dir for every output option given in `args` (an
    argparse namespace): the CLI calls it before any work, so a bad -o fails at once."""
    for attr, option in OUTPUT_OPTIONS:
        value = getattr(args, attr, None)
        if isinstance(value, str):
            check_output_path(value, option)
    for attr, option in OUTPUT_DIR_OPTIONS:
        value = getattr(args, attr, None)
        if isinstance(value, str):
            check_output_dir(value, option)


# The command line's input options (argparse attribute, option) and the positional FILE
# and TOPOLOGY arguments; each must name a regular file (what it is, for the message).
INPUT_OPTIONS = (("file", "FILE", "schedule"), ("topology", "--topology", "topology"),
                 ("pap", "--pap", "process arrival pattern"),
                 ("platform_from", "--platform-from", "topology"), ("hostfile", "--hostfile", "host"),
                 ("cache", "--cache", "sweep cache"))


def check_input_path(path, option: str, what: str) -> None:
    """Refuse, before any work, an input that read_input would refuse for its type: a
    FIFO, a device, a socket, a directory. Reads nothing (stat only). A path that does not
    exist here is left to the reader (sweep finds a bundled topology relative to the
    repository; a missing --cache is started) - it names the file when it is missing."""
    text = os.fspath(path)
    if text == "":
        raise InputError(option, "''", f"expected the name of a {what} file")
    try:
        st = os.stat(text)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise InputError(option, text, f"expected a regular {what} file, found {file_kind(st.st_mode)}")


def check_path_options(args) -> None:
    """Every input and output option of an argparse namespace, checked before any work:
    check_input_path for inputs, check_output_path / check_output_dir for outputs. The one
    call the command line makes."""
    for attr, option, what in INPUT_OPTIONS:
        value = getattr(args, attr, None)
        for v in value if isinstance(value, list) else [value]:  # verify takes several files
            if not isinstance(v, str):
                continue
            if attr == "topology" and getattr(args, "command", None) == "pools":
                option = "TOPOLOGY"  # a positional argument there
            if attr == "file" and getattr(args, "command", None) == "show" and os.path.isdir(v):
                continue  # `show DIR` lists a schedules directory (cmd_ls checks it)
            check_input_path(v, option, what)
    check_output_options(args)


def check_output_dir(path, option: str) -> Path:
    """A directory to create or fill (bench --keep): an existing directory, or a new name
    whose nearest existing ancestor is a writable directory (missing parents are made)."""
    text = os.fspath(path)
    if text == "":
        raise InputError(option, "''", "expected a directory name, got an empty string")
    p = Path(text)
    probe = p
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():
            raise InputError(option, text, f"{str(probe)!r} is a symbolic link to a missing "
                                           f"directory; expected a directory")
        probe = probe.parent
    if not probe.is_dir():
        where = "is" if probe == p else f"is inside {str(probe)!r}, which is"
        raise InputError(option, text, f"{where} {file_kind(os.stat(probe).st_mode)}; expected "
                                       f"a directory (existing, or to be created)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(option, text, f"cannot create files in {str(probe)!r} (no permission)")
    return p


def _keep_owner_and_mode(fd: int, old: os.stat_result | None) -> None:
    """Give the new file the replaced file's permission bits, owner and group (where the
    process may change them: chown needs root, chgrp a group of the process's own)."""
    if old is None:
        return
    new = os.fstat(fd)
    if (new.st_uid, new.st_gid) != (old.st_uid, old.st_gid):
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except PermissionError:
            try:
                os.fchown(fd, -1, old.st_gid)
            except PermissionError:
                pass
    os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)


def _write_error(path: Path, e: OSError) -> OutputError:
    what = "no space left on the device" if e.errno in (errno.ENOSPC, errno.EDQUOT) else e.strerror
    return OutputError(str(path), "", f"cannot write the file ({what}); nothing written, "
                                      f"any old file is unchanged", e.errno)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> int:
    """Write `data` (text as UTF-8) to `path` atomically; returns the number of bytes.

    OutputError (an InputError and an OSError) for a target that is not a regular file, or
    when the write fails (full disk, no permission): the old file then is unchanged."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path, old = _target(path, None)
    fd, tmp = _create_temp(path)
    try:
        try:
            _keep_owner_and_mode(fd, old)
            view, done = memoryview(raw), 0
            while done < len(raw):
                done += os.write(fd, view[done:done + (1 << 24)])
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, OutputError):
            raise _write_error(path, e) from None
        raise
    return len(raw)


@contextmanager
def replacing(path: str | os.PathLike):
    """For writers that want a file name: yields a temporary path beside `path`, renamed
    over `path` (its mode and owner kept) when the block ends normally and removed when it
    raises. A full disk (or a quota) in the block becomes an OutputError."""
    path, old = _target(path, None)
    fd, tmp = _create_temp(path)
    try:
        try:
            _keep_owner_and_mode(fd, old)
        finally:
            os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, OutputError) and e.errno in (
                errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO):
            raise _write_error(path, e) from None
        raise


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """fig.savefig, atomically (the format from the target's suffix, PNG by default)."""
    with replacing(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".").lower() or "png", dpi=dpi)
