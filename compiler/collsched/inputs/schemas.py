"""JSON schemas of the YAML inputs, and the one way to read such an input.

`read_yaml(path, schema)` parses a YAML file and validates it against a schema here; every
problem becomes one `InputError` line: the file, the field path (``sites[1].lan.bandwidth``),
what was expected there, and the line of the file. The schemas check structure and types
only; quantities with units and cross-field rules are checked by the modules that read them
(topology.py, arrivals.py), which use `Doc.fail` to report with the same format.

Schema nodes may carry an ``x-expect`` key: the text shown to the user when that node does
not match (jsonschema ignores unknown keys).
"""
from __future__ import annotations

from dataclasses import dataclass

import jsonschema
import yaml

from ..errors import InputError
from ..files import read_input
from .compute import SCHEMA as REDUCTION  # the `reduction:` section (reduction cost)

DRAFT = "https://json-schema.org/draft/2020-12/schema"

TIME = {"type": ["number", "string"],
        "x-expect": "expected a time such as 50us, 0.05s or a bare number of seconds"}
BANDWIDTH = {"type": ["number", "string"],
             "x-expect": "expected a bandwidth such as 1Gbit/s, 125MB/s or a bare number of bytes/s"}
NAME = {"type": "string", "minLength": 1, "x-expect": "expected a non-empty name (a string)"}

LINEAR = {  # LogGP os(m) or g(m) = a + m * per_byte
    "type": "object",
    "x-expect": "expected a mapping {a: <time>, per_byte: <time per byte>}",
    "properties": {"a": TIME, "per_byte": TIME},
    "required": ["a", "per_byte"],
    "additionalProperties": False,
}

LINK_CLASS = {  # latency and bandwidth of a class of host pairs (LAN of a site, intra-host)
    "type": "object",
    "x-expect": "expected a mapping {latency: <time>, bandwidth: <bandwidth>}",
    "properties": {"latency": TIME, "bandwidth": BANDWIDTH,
                   "send_overhead": LINEAR, "gap": LINEAR},
    "required": ["latency", "bandwidth"],
    "additionalProperties": False,
}

WAN_LINK = {
    "type": "object",
    "x-expect": "expected a mapping {between: [SITE_A, SITE_B], latency: ..., bandwidth: ...}",
    "properties": {
        "between": {"type": "array", "items": NAME, "minItems": 2, "maxItems": 2,
                    "x-expect": "expected two site names, [SITE_A, SITE_B]"},
        "latency": TIME, "bandwidth": BANDWIDTH,
        "latency_back": TIME, "bandwidth_back": BANDWIDTH,
        "send_overhead": LINEAR, "gap": LINEAR,
    },
    "required": ["between", "latency", "bandwidth"],
    "additionalProperties": False,
}

NET_LINK = {  # a wide-area link of the `links:` form (network.py)
    "type": "object",
    "x-expect": "expected a mapping {name: ..., between: [POINT, POINT], latency: ..., "
                "bandwidth: ..., sharing: shared|split}",
    "properties": {
        "name": NAME,
        "between": {"type": "array", "items": NAME, "minItems": 2, "maxItems": 2,
                    "x-expect": "expected the two points it joins, [SITE_OR_ROUTER, SITE_OR_ROUTER]"},
        "latency": TIME, "bandwidth": BANDWIDTH,
        "sharing": {"enum": ["shared", "split"],
                    "x-expect": "expected shared (one capacity for both directions) or split "
                                "(one per direction)"},
        "bandwidth_back": BANDWIDTH,
    },
    "required": ["name", "latency", "bandwidth"],
    "additionalProperties": False,
}

ROUTE_HOP = {"oneOf": [NAME, {"type": "object", "properties": {
                 "link": NAME, "back": {"type": "boolean", "x-expect": "expected true or false"}},
                 "required": ["link"], "additionalProperties": False}],
             "x-expect": "expected a link name, or {link: NAME, back: true} to cross a split "
                         "link from between[1] to between[0]"}

NET_ROUTE = {  # a route of the `links:` form: through points, or link by link
    "type": "object",
    "x-expect": "expected a mapping {between: [SITE_A, SITE_B], via: [POINT, ...]} or "
                "{from: SITE_A, to: SITE_B, links: [LINK, ...]}",
    "properties": {
        "between": {"type": "array", "items": NAME, "minItems": 2, "maxItems": 2,
                    "x-expect": "expected two site names, [SITE_A, SITE_B]"},
        "via": {"type": "array", "items": NAME,
                "x-expect": "expected a list of points (sites or routers) in order"},
        "from": NAME, "to": NAME,
        "links": {"type": "array", "items": ROUTE_HOP, "minItems": 1,
                  "x-expect": "expected a list of links in order, each a name or {link: NAME, back: true}"},
        "latency": TIME,
    },
    "additionalProperties": False,
}

SITE = {
    "type": "object",
    "x-expect": "expected a mapping {name: ..., hosts: <count or list of names>, lan: {...}}",
    "properties": {
        "name": NAME,
        "hosts": {"oneOf": [{"type": "integer", "minimum": 1},
                            {"type": "array", "items": NAME, "minItems": 1}],
                  "x-expect": "expected a number of hosts (at least 1) or a list of host names"},
        "lan": LINK_CLASS,
    },
    "required": ["name"],
    "additionalProperties": False,
}

HOST = {
    "type": "object",
    "x-expect": "expected a mapping {name: HOST, site: SITE}",
    "properties": {"name": NAME, "site": NAME},
    "required": ["name", "site"],
    "additionalProperties": False,
}

MATRIX_ROWS = {"type": "array", "minItems": 1,
               "items": {"type": "array",
                         "x-expect": "expected a row: a list with one value per host"},
               "x-expect": "expected a square matrix: a list of rows, one per host"}

MATRIX = {
    "type": "object",
    "x-expect": "expected a mapping {latency: [[...]], bandwidth: [[...]]}",
    "properties": {
        "latency": MATRIX_ROWS, "bandwidth": MATRIX_ROWS,
        "latency_unit": {"type": "string", "x-expect": "expected a time unit such as us or ms"},
        "bandwidth_unit": {"type": "string",
                           "x-expect": "expected a bandwidth unit such as Mbit/s or MB/s"},
    },
    "required": ["latency", "bandwidth"],
    "additionalProperties": False,
}

PLACEMENT = {
    "type": "object",
    "x-expect": "expected a mapping {ranks_per_host: N} or {hosts: [host of rank 0, ...]}",
    "properties": {
        "ranks_per_host": {"type": "integer", "minimum": 1,
                           "x-expect": "expected a whole number of ranks per host, at least 1"},
        "order": {"enum": ["block", "cyclic"], "x-expect": "expected block or cyclic"},
        "hosts": {"type": "array", "items": NAME, "minItems": 1,
                  "x-expect": "expected a list of host names, one per rank"},
    },
    "additionalProperties": False,
}

TOPOLOGY_SCHEMA = {
    "$schema": DRAFT,
    "title": "collsched topology",
    "type": "object",
    "x-expect": "expected a mapping with sites (or hosts) and their links",
    "properties": {
        "name": NAME,
        "description": {"type": "string"},
        "duplex": {"enum": ["half", "full"], "x-expect": "expected half or full"},
        "sites": {"type": "array", "items": SITE, "minItems": 1,
                  "x-expect": "expected a list of sites"},
        "hosts": {"type": "array", "items": HOST, "minItems": 1,
                  "x-expect": "expected a list of hosts, each {name: HOST, site: SITE}"},
        "wan": {"type": "array", "items": WAN_LINK, "x-expect": "expected a list of WAN links"},
        "links": {"type": "array", "items": NET_LINK,
                  "x-expect": "expected a list of wide-area links, each {name, between, latency, bandwidth}"},
        "routes": {"type": "array", "items": NET_ROUTE,
                   "x-expect": "expected a list of routes between sites"},
        "matrix": MATRIX,
        "intra_host": LINK_CLASS,
        "eager_limit": {"type": ["number", "string"],
                        "x-expect": "expected a message size such as 64KiB or a bare number of bytes"},
        "tcp_window": {"type": ["number", "string"],
                       "x-expect": "expected a TCP window size such as 4MiB or a bare number of bytes"},
        "send_overhead": LINEAR,
        "gap": LINEAR,
        "placement": PLACEMENT,
        # Checked field by field in msgcosts.parse (selectors name sites of the file).
        "message_costs": {"type": "object",
                          "x-expect": "expected a mapping: preset: simgrid-smpi, or link "
                                      "classes (all, lan, wan, ...) with lists of segments"},
        "reduction": REDUCTION,
    },
    "additionalProperties": False,
}

ARRIVALS_ROW = {"type": "array", "minItems": 1,
                "items": {"type": ["number", "string"],
                          "x-expect": "expected an arrival time (a number in the file's unit, "
                                      "or a time such as 1.5ms)"},
                "x-expect": "expected a list of arrival times, one per rank"}

PAP_SCHEMA = {
    "$schema": DRAFT,
    "title": "collsched process arrival pattern",
    "type": "object",
    "x-expect": "expected a mapping with unit and arrivals (or iterations)",
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "unit": {"type": "string", "x-expect": "expected a time unit: s, ms, us or ns"},
        "arrivals": ARRIVALS_ROW,
        "iterations": {"type": "array", "items": ARRIVALS_ROW, "minItems": 1,
                       "x-expect": "expected a list of iterations, each a list of arrival times"},
    },
    "additionalProperties": False,
}


# --- reading ----------------------------------------------------------------------------

def fmt_path(parts) -> str:
    """['sites', 1, 'lan', 'bandwidth'] -> 'sites[1].lan.bandwidth'."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def describe(value) -> str:
    """A short, one-line description of a YAML value for messages (never the whole value:
    a 10 MB string or a 5000-digit number is cut to an excerpt)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, int) and abs(value).bit_length() > 200:  # repr fails past 4300 digits
        digits = int((abs(value).bit_length() - 1) * 0.30102999566398)
        while 10 ** digits <= abs(value):
            digits += 1
        return f"an integer of {digits} digits"
    if isinstance(value, str) and len(value) > 60:
        value = value[:80]
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Doc:
    """A parsed YAML input: its data, and where it came from (for error lines)."""

    source: str
    text: str
    data: object

    def line_of(self, parts) -> int | None:
        """1-based line of the node at the path (of its key, in a mapping), or None when the
        path is not in the file. Walks the parser's events (no nodes are built: a message
        about the last of a million values stays fast)."""
        if not parts:
            return None
        target = list(parts)
        # One frame per open collection: its path, whether it is a mapping, the next index
        # (sequence) or the pending key and its line (mapping), whether it is inside a key.
        frames: list[dict] = []
        try:
            for ev in yaml.parse(self.text, Loader=_SafeLoader):
                if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                    frames.pop()
                    continue
                if not isinstance(ev, (yaml.ScalarEvent, yaml.SequenceStartEvent,
                                       yaml.MappingStartEvent, yaml.AliasEvent)):
                    continue
                top = frames[-1] if frames else None
                path, line, skip = None, ev.start_mark.line + 1, False
                if top is None:
                    path = []
                elif top["skip"]:
                    skip = True
                elif top["map"] and top["key_next"]:  # this node is a key
                    top["key_next"] = False
                    top["key"] = ev.value if isinstance(ev, yaml.ScalarEvent) else None
                    top["key_line"] = line
                    skip = True
                elif top["map"]:
                    top["key_next"] = True
                    path, line = top["path"] + [top["key"]], top["key_line"]
                else:
                    path = top["path"] + [top["i"]]
                    top["i"] += 1
                if path is not None and path == target:
                    return line
                if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                    frames.append({"path": path, "map": isinstance(ev, yaml.MappingStartEvent),
                                   "i": 0, "key_next": True, "key": None, "key_line": None,
                                   "skip": skip or path is None})
        except yaml.YAMLError:
            return None
        return None

    def fail(self, parts, expected: str, line_at=None) -> InputError:
        """An InputError for the field at `parts` (list of keys / indices), to raise.

        The line shown is that of `parts`, or of `line_at` when given (e.g. the parent
        mapping of a missing field).
        """
        expected = " ".join(str(expected).split())  # always one line
        line = self.line_of(parts if line_at is None else line_at)
        if line is not None:
            expected += f" (line {line})"
        return InputError(self.source, fmt_path(parts), expected)


_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Bounds on a YAML input, checked on the parser's event stream before anything is built:
# no input needs more (the largest bundled topology has a few hundred values; a measured
# matrix of 255 hosts 2 x 255^2), and within them a file loads, or is refused, within a
# few seconds and well under 1 GiB. Aliases (*name) are refused outright: no input needs
# them, and a few hundred bytes of nested aliases expand to billions of values.
MAX_NODES = 1 << 17
MAX_DEPTH = 64


class _Bounds(Exception):
    def __init__(self, mark, what):
        self.mark, self.what = mark, what


def _check_events(text: str) -> None:
    """Walk the event stream once: refuse aliases, more than MAX_NODES values, nesting
    deeper than MAX_DEPTH and a key given twice in one mapping (YAML forbids it; PyYAML
    would keep the last silently). Raises _Bounds, or a yaml.YAMLError for bad syntax."""
    nodes = 0
    stack = []  # per open collection: None for a sequence, [keys seen, next is a key] for a mapping
    for ev in yaml.parse(text, Loader=_SafeLoader):
        if isinstance(ev, yaml.AliasEvent):
            raise _Bounds(ev.start_mark, f"aliases (*{ev.anchor}) are not allowed in collsched "
                                         f"inputs; write the value out")
        if isinstance(ev, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            nodes += 1
            if nodes > MAX_NODES:
                raise _Bounds(ev.start_mark, f"too many values: at most {MAX_NODES} are read")
            top = stack[-1] if stack else None
            if top is not None:
                if top[1] and isinstance(ev, yaml.ScalarEvent):
                    if ev.value in top[0]:
                        raise _Bounds(ev.start_mark, f"key {describe(ev.value)} appears twice in "
                                                     f"one mapping; give each field once")
                    top[0].add(ev.value)
                top[1] = not top[1]
            if isinstance(ev, yaml.SequenceStartEvent):
                stack.append(None)
            elif isinstance(ev, yaml.MappingStartEvent):
                stack.append([set(), True])
            if len(stack) > MAX_DEPTH:
                raise _Bounds(ev.start_mark, f"nested too deeply: at most {MAX_DEPTH} levels")
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            stack.pop()


def _yaml_error(source: str, e: yaml.YAMLError, text: str) -> InputError:
    if isinstance(e, yaml.reader.ReaderError) and isinstance(e.position, int):
        line = text.count("\n", 0, e.position) + 1
        char = e.character if isinstance(e.character, int) else ord(str(e.character)[:1] or "?")
        return InputError(source, f"line {line}", f"invalid YAML (character #x{char:04x} is not "
                                                  f"allowed: control characters are not text)")
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        what = " ".join(str(e.problem or e.context or "syntax error").split())
        field = f"line {mark.line + 1}" if mark is not None else ""
        return InputError(source, field, f"invalid YAML ({what})")
    return InputError(source, "", f"invalid YAML ({' '.join(str(e).split())})")


def decode_text(source: str, raw: bytes, what: str) -> str:
    """UTF-8 text (a UTF-8 byte order mark is dropped); one InputError line otherwise."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(source, "", f"expected a UTF-8 {what} file, found UTF-16 (a byte "
                                     f"order mark); save it as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError(source, f"line {line}", f"expected UTF-8 text, found byte "
                                                 f"{raw[e.start]:#04x} at offset {e.start} "
                                                 f"(binary data, or another encoding)") from None


def parse_yaml(path, what: str = "YAML", text: str | None = None) -> Doc:
    """Read and parse a YAML file; InputError for unreadable files or invalid YAML.

    The file is read with files.read_input (a regular file of at most MAX_INPUT_BYTES),
    and checked on its events (_check_events) before a node is built. text: the file's
    text when the caller has read it already."""
    source = str(path)
    if text is None:
        text = decode_text(source, read_input(path, what), what)
    nul = text.find("\0")
    if nul >= 0:
        raise InputError(source, f"line {text.count(chr(10), 0, nul) + 1}",
                         "expected text, found a NUL byte (binary data)")
    try:
        _check_events(text)
        data = yaml.load(text, Loader=_SafeLoader)
    except _Bounds as b:
        raise InputError(source, f"line {b.mark.line + 1}", b.what) from None
    except yaml.YAMLError as e:
        raise _yaml_error(source, e, text) from None
    except ValueError as e:
        if "digits" in str(e):  # Python's limit on converting long integers
            raise InputError(source, "", "a number of more than 4300 digits; expected times, "
                                         "sizes and counts of ordinary magnitude") from None
        raise InputError(source, "", f"invalid YAML value ({e})") from None
    except (TypeError, ArithmeticError, RecursionError) as e:  # the constructor's own errors
        raise InputError(source, "", f"invalid YAML value ({e.__class__.__name__}: {e})") from None
    return Doc(source, text, data)


def _error_key(e: jsonschema.ValidationError):
    weak = e.validator in ("anyOf", "oneOf", "additionalProperties")
    return (len(e.absolute_path), weak, [str(p) for p in e.absolute_path])


def validate(doc: Doc, schema: dict) -> None:
    """Validate doc.data against schema; the first problem becomes one InputError."""
    if doc.data is None:
        raise InputError(doc.source, "", f"file is empty; {schema.get('x-expect', '')}".rstrip("; "))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc.data), key=_error_key)
    if not errors:
        return
    e = errors[0]
    parts = list(e.absolute_path)
    sch = e.schema if isinstance(e.schema, dict) else {}
    if e.validator == "required":
        props = sch.get("properties", {})
        have = e.instance if isinstance(e.instance, dict) else {}
        missing = [k for k in sch.get("required", []) if k not in have]
        name = missing[0] if missing else "?"
        hint = props.get(name, {}).get("x-expect", "")
        raise doc.fail(parts + [name], "missing required field" + (f"; {hint}" if hint else ""),
                       line_at=parts)
    if e.validator == "additionalProperties":
        known = sorted(sch.get("properties", {}))
        have = e.instance if isinstance(e.instance, dict) else {}
        extra = [k for k in have if k not in sch.get("properties", {})]
        name = extra[0] if extra else "?"
        raise doc.fail(parts + [name], f"unknown field; expected one of: {', '.join(known)}")
    expect = sch.get("x-expect")
    if expect is None:
        # Not e.message: it holds the repr of the whole offending value.
        if e.validator == "type":
            types = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
            expect = "expected " + " or ".join(f"a{'n' * (t[0] in 'aeiou')} {t}" for t in map(str, types))
        else:
            expect = f"expected {e.validator} {describe(e.validator_value)}"
    raise doc.fail(parts, f"{expect}, got {describe(e.instance)}")


def looks_like_xml(text: str) -> bool:
    """Whether an input's text is XML (a SimGrid platform, say) rather than YAML."""
    head = text.lstrip()[:4096]
    return head.startswith("<?xml") or "<platform" in head or head.startswith("<!DOCTYPE platform")


def read_yaml(path, schema: dict) -> Doc:
    """Parse and validate a YAML input; returns the Doc or raises one InputError."""
    what = schema.get("title", "collsched YAML").removeprefix("collsched ")
    source = str(path)
    text = decode_text(source, read_input(path, what), what)
    if looks_like_xml(text):
        if schema is TOPOLOGY_SCHEMA:
            raise InputError(source, "", "this is a SimGrid platform XML, not a collsched "
                             "topology YAML: pass it as --platform FILE.xml --hostfile FILE with "
                             "--backend smpi, or describe it in YAML (docs/inputs.md)")
        raise InputError(source, "", f"this is an XML file, not a collsched {what} YAML "
                                     f"(docs/inputs.md)")
    doc = parse_yaml(path, what, text=text)
    validate(doc, schema)
    return doc
