"""A user's own SimGrid platform and host file, for the smpi backend (docs/lab.md, "Your own
SimGrid platform").

`--platform FILE.xml --hostfile FILE` make SimGrid run that platform instead of the one the
lab generates from `--topology` (platform.py); the host file places the ranks. This module
reads both before anything runs and says what is wrong in one line:

* the platform: a regular file of at most MAX_PLATFORM_BYTES, XML (read with the standard
  library's ElementTree, so no DTD is fetched) without entity declarations (`<!ENTITY`:
  refused, so no entity can expand), whose root element is `<platform>`. Its hosts are
  every `<host id>`, `<peer id>` and the members of every `<cluster>` and `<cabinet>`
  (prefix + each number of `radical` + suffix, radical as "0-15" or "0-3,7,9-10"), at any
  zone depth;
* the host file: SMPI's syntax, one host a line, `name` or `name:count` (count slots on
  that host), blank lines ignored; every name a host of the platform, at least as many
  slots as ranks. Rank r runs on the r-th slot.

The lab then writes the slots it uses, one a line (write_hostfile), and passes that to
smpirun: the placement is the one read here, whatever smpirun's own reading would do.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..files import write_atomic

MAX_PLATFORM_BYTES = 64 << 20
MAX_HOSTFILE_BYTES = 1 << 20
MAX_SLOTS = 1 << 20  # slots a host file may expand to
MAX_PLATFORM_HOSTS = 1 << 22  # hosts the clusters of a platform may expand to
_RADICAL_ITEM = re.compile(r"\s*([0-9]{1,9})\s*(?:-\s*([0-9]{1,9})\s*)?", re.ASCII)


@dataclass
class UserPlatform:
    xml: Path  # absolute path of the platform XML
    hostfile: Path  # absolute path of the host file (one SimGrid host a line, `host:count` allowed)
    hosts: list[str]  # the host of every rank slot, expanded from the host file, in order
    platform_hosts: list[str]  # every host the XML declares (hosts and cluster members)

    def describe(self, ranks: int | None = None) -> dict:
        """What a report records of the platform that ran."""
        out = {"platform": str(self.xml), "hostfile": str(self.hostfile),
               "platform_hosts": len(self.platform_hosts), "slots": len(self.hosts)}
        if ranks is not None:
            out["hosts_used"] = len(set(self.hosts[:ranks]))
        return out

    def write_hostfile(self, path, ranks: int) -> Path:
        """The first `ranks` slots, one host a line (what smpirun gets)."""
        if ranks > len(self.hosts):
            raise InputError(str(self.hostfile), "slots", f"expected at least {ranks} slots (one per "
                                                          f"rank), got {len(self.hosts)}")
        path = Path(path)
        write_atomic(path, "".join(h + "\n" for h in self.hosts[:ranks]))
        return path


def _read_bounded(path: str, flag: str, what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; one InputError else. A device,
    FIFO or directory is refused by its type, before any read (so /dev/zero cannot hang)."""
    text = os.fspath(path)
    if text == "":
        raise InputError(flag, "''", f"expected the name of a {what}")
    try:
        st = os.stat(text)
    except OSError as e:
        raise InputError(text, flag, f"expected an existing {what}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(text, flag, f"expected a {what}, found a directory")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(text, flag, f"expected a regular {what}, found a special file")
    if st.st_size > limit:
        raise InputError(text, flag, f"expected a {what} of at most {limit} bytes, got {st.st_size}")
    try:
        with open(text, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(text, flag, f"cannot read it: {e.strerror}") from None
    if len(data) > limit:  # grew since the stat
        raise InputError(text, flag, f"expected a {what} of at most {limit} bytes")
    return data


def _looks_like_yaml(data: bytes) -> bool:
    try:
        import yaml

        doc = yaml.safe_load(data)
    except Exception:  # noqa: BLE001 - any failure: not YAML
        return False
    return isinstance(doc, (dict, list))


def parse_radical(text: str, where: tuple[str, str]) -> list[int]:
    """SimGrid's radical: comma-separated numbers and ranges A-B (A <= B)."""
    out: list[int] = []
    for item in text.split(","):
        m = _RADICAL_ITEM.fullmatch(item)
        lo = int(m.group(1)) if m else 0
        hi = int(m.group(2)) if m and m.group(2) is not None else lo
        if m is None or hi < lo:
            raise InputError(where[0], where[1], f"expected a radical such as 0-15 or 0-3,7,9-10, "
                                                 f"got {text[:60]!r}")
        if len(out) + hi - lo + 1 > MAX_PLATFORM_HOSTS:
            raise InputError(where[0], where[1], f"expected at most {MAX_PLATFORM_HOSTS} hosts")
        out.extend(range(lo, hi + 1))
    return out


def platform_hosts(xml: str) -> list[str]:
    """Every host a SimGrid platform file declares, in document order (module docstring);
    one InputError when it is not a platform SimGrid could read."""
    import xml.etree.ElementTree as ET

    data = _read_bounded(xml, "--platform", "SimGrid platform file (XML)", MAX_PLATFORM_BYTES)
    if b"<!entity" in data.lower():
        raise InputError(xml, "<!ENTITY", "expected no entity declarations (a SimGrid platform "
                                          "needs none; they are refused so that none can expand)")
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"<"):
        hint = (" (this is YAML: a topology goes to --topology, a SimGrid platform to --platform)"
                if _looks_like_yaml(data) else "")
        raise InputError(xml, "--platform", f"expected a SimGrid platform file (XML, <platform "
                                            f"version=...>), got text that is not XML{hint}")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        line, col = getattr(e, "position", (0, 0))
        raise InputError(xml, f"line {line}", f"expected well-formed XML (SimGrid platform): "
                                              f"{str(e).split(':')[0]} at column {col + 1}") from None
    if root.tag != "platform":
        raise InputError(xml, f"<{str(root.tag)[:40]}>", "expected a SimGrid platform: the root "
                                                         "element <platform version=...>")
    hosts: list[str] = []
    for el in root.iter():
        if el.tag in ("host", "peer"):
            name = el.get("id")
            if not name:
                raise InputError(xml, f"<{el.tag}>", "expected an id attribute")
            hosts.append(name)
        elif el.tag in ("cluster", "cabinet"):
            name = el.get("id", "?")
            where = (xml, f"<{el.tag} id={name!r}>")
            if el.get("radical") is None:
                raise InputError(*where, "expected prefix, radical and suffix attributes")
            prefix, suffix = el.get("prefix", ""), el.get("suffix", "")
            hosts.extend(f"{prefix}{k}{suffix}" for k in parse_radical(el.get("radical"), where))
        if len(hosts) > MAX_PLATFORM_HOSTS:
            raise InputError(xml, "--platform", f"expected at most {MAX_PLATFORM_HOSTS} hosts")
    if not hosts:
        raise InputError(xml, "--platform", "expected a SimGrid platform with hosts (<host>, "
                                            "<cluster>), found none")
    seen: set[str] = set()
    for h in hosts:
        if h in seen:
            raise InputError(xml, f"host {h[:60]!r}", "expected every host declared once")
        seen.add(h)
    return hosts


def read_hostfile(path: str, known: set[str], platform: str) -> list[str]:
    """The slots of an SMPI host file, expanded (module docstring)."""
    data = _read_bounded(path, "--hostfile", "host file", MAX_HOSTFILE_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "--hostfile", "expected a text host file (UTF-8)") from None
    slots: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        name, count = line, 1
        if ":" in line:  # SMPI's `host:count` (the count after the last colon)
            name, _, tail = line.rpartition(":")
            tail = tail.strip()
            if not (tail.isascii() and tail.isdigit() and 1 <= int(tail) <= MAX_SLOTS):
                raise InputError(path, f"line {n}", f"expected `host` or `host:count` with count "
                                                    f"1..{MAX_SLOTS}, got {line[:60]!r}")
            name, count = name.strip(), int(tail)
        if name not in known:
            raise InputError(path, f"line {n}", f"expected a host of {platform}; it declares no "
                                                f"host {name[:60]!r}")
        if len(slots) + count > MAX_SLOTS:
            raise InputError(path, f"line {n}", f"expected at most {MAX_SLOTS} slots in all")
        slots.extend([name] * count)
    if not slots:
        raise InputError(path, "--hostfile", "expected at least one line `host` or `host:count`")
    return slots


def load_platform(xml: str, hostfile: str, ranks: int | None = None) -> UserPlatform:
    """The platform and host file, checked (module docstring); ranks: the slots needed."""
    names = platform_hosts(xml)
    slots = read_hostfile(hostfile, set(names), xml)
    if ranks is not None and len(slots) < ranks:
        raise InputError(hostfile, "slots", f"expected at least {ranks} slots (one per rank), got "
                                            f"{len(slots)}")
    return UserPlatform(Path(xml).resolve(), Path(hostfile).resolve(), slots, names)


def check_options(backend: str, platform: str | None, hostfile: str | None) -> bool:
    """Whether --platform is given; one InputError when --platform and --hostfile do not go
    together under smpi (--hostfile alone is real MPI's: launch.check_options)."""
    if platform is None:
        if backend == "smpi" and hostfile is not None:
            raise InputError("--hostfile", hostfile, "only with --backend mpi, or with --platform "
                                                     "FILE.xml under --backend smpi (the platform's "
                                                     "hosts the ranks run on)")
        return False
    if backend != "smpi":
        raise InputError("--platform", platform, "expected only with --backend smpi (a SimGrid platform)")
    if hostfile is None:
        raise InputError("--platform", platform, "expected --hostfile FILE with it (the platform's "
                                                 "hosts the ranks run on, one a line or host:count)")
    return True


def user_platform(backend: str, platform: str | None, hostfile: str | None, ranks: int,
                  topology: str | None) -> UserPlatform | None:
    """The user's platform when `platform` is given, checked with its host file for `ranks`
    ranks, else None; one InputError when --platform and --hostfile do not go together under
    SMPI or the topology (what the compiler and the models use) is missing."""
    if not check_options(backend, platform, hostfile):
        return None
    if topology is None:
        raise InputError("--platform", str(platform), "expected --topology with it: the compiler and "
                                                      "the cost models predict from a topology (e.g. "
                                                      "one `collsched measure` wrote for the platform)")
    return load_platform(platform, hostfile, ranks)


def platform_record(user: UserPlatform | None, ranks: int, topology: str | None) -> dict:
    """What a report says of the platform SimGrid ran: the user's (paths), or the one the
    lab generated from the topology."""
    if user is None:
        return {"generated_from": topology or "the homogeneous default"}
    return user.describe(ranks)


def placement_note(user: UserPlatform, rank_host, ranks: int) -> str | None:
    """A note when the host file and the topology group the ranks onto hosts differently
    (ranks sharing a host in one and not in the other; host names may differ, the grouping
    is what the predictions depend on), else None."""
    import numpy as np

    mine = np.unique(np.asarray(user.hosts[:ranks]), return_inverse=True)[1]
    theirs = np.asarray(rank_host)[:ranks]
    for r in range(ranks):
        a, b = mine == mine[r], theirs == theirs[r]
        if not np.array_equal(a, b):
            s = int(np.nonzero(a != b)[0][0])
            together = "on one host" if a[s] else "on different hosts"
            return (f"The host file places ranks {r} and {s} {together}, the topology not: its "
                    f"predictions assume another placement than the run's.")
    return None
