"""Hostile YAML inputs: a generated corpus of topology and
arrival-pattern files - alias bombs of several shapes, deep nesting, numeric extremes,
wrong types, binary garbage, bad encodings, duplicate keys, empty files, huge strings,
unknown fields - each fed through the real command line.

Every case: no traceback, exit 2 (or 0 for an input that is in fact valid), exactly one
line on stderr naming the file (and the field, where there is one), nothing written in
the output directory, under 5 s, and the process under 1 GiB at its peak.

Most cases run in-process (collsched.cli.main, stderr captured) for speed; a handful run
the installed `collsched` in a subprocess, as a user would.
"""
from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from collsched.inputs import schemas
from collsched.cli import main
from collsched.files import MAX_INPUT_BYTES

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
TIME_LIMIT_S = 5.0


@dataclass
class Case:
    name: str
    kind: str  # "topology" or "pap"
    body: bytes
    code: int | tuple = 2  # the documented exit code (a tuple: either is right)
    field: str | None = None  # a text the error line must contain besides the file name
    args: tuple = ()  # extra arguments (replacing the default --ranks 4 for topologies)


def _b(text: str) -> bytes:
    return text.encode("utf-8")


LAN = "lan: {latency: 50us, bandwidth: 1Gbit/s}"


def topo(sites_line: str, extra: str = "") -> bytes:
    return _b(f"sites:\n  - {sites_line}\n{extra}")


def site(hosts="4", lan=LAN, name="A") -> str:
    return f"{{name: {name}, hosts: {hosts}, {lan}}}"


def laughs(levels: int, width: int, leaf: str = "1", mapping=False) -> list[str]:
    """The classic nested-anchor bomb: width**levels leaves in a few hundred bytes."""
    lines = [f"l0: &l0 [{', '.join([leaf] * width)}]"]
    for i in range(1, levels):
        items = [f"*l{i - 1}"] * width
        if mapping:
            lines.append(f"l{i}: &l{i} {{{', '.join(f'k{j}: *l{i - 1}' for j in range(width))}}}")
        else:
            lines.append(f"l{i}: &l{i} [{', '.join(items)}]")
    return lines


def alias_cases() -> list[Case]:
    out = []
    bomb9 = laughs(9, 9, '"lol"')  # 9^9 = 387 million strings, about 400 bytes
    out.append(Case("bomb-arrivals", "pap", _b("\n".join(bomb9[:-1]) + "\narrivals: [*l7, *l7]\n"),
                    field="aliases"))
    out.append(Case("bomb-iterations", "pap", _b("\n".join(bomb9) + "\niterations: *l8\n"),
                    field="aliases"))
    out.append(Case("bomb-sites", "topology", _b("\n".join(bomb9) + "\nsites: *l8\n"), field="aliases"))
    out.append(Case("bomb-mapping", "topology",
                    _b("\n".join(laughs(7, 6, "1", mapping=True)) + "\nmatrix: *l6\n"), field="aliases"))
    # 10^8 aliased numbers in about 55 KB: one list of 10^4 numbers, aliased 10^4 times.
    numbers = "[" + ", ".join(["1.5"] * 10000) + "]"
    out.append(Case("aliased-numbers", "pap",
                    _b(f"x: &n {numbers}\niterations: [{', '.join(['*n'] * 10000)}]\n"), field="aliases"))
    out.append(Case("self-alias", "pap", _b("arrivals: &a [0, *a]\n"), field="aliases"))
    out.append(Case("alias-name", "topology", _b(f"description: &n grid\nname: *n\nsites:\n  - {site()}\n"),
                    field="aliases"))
    out.append(Case("alias-latency", "topology",
                    _b("sites:\n  - {name: A, hosts: 4, lan: {latency: &l 50us, bandwidth: 1Gbit/s}}\n"
                       "intra_host: {latency: *l, bandwidth: 1Gbit/s}\n"), field="aliases"))
    out.append(Case("alias-unit", "pap", _b("name: &u ms\nunit: *u\narrivals: [0, 1, 2, 3]\n"),
                    field="aliases"))
    out.append(Case("alias-lan", "topology",
                    _b(f"sites:\n  - {{name: A, hosts: 2, lan: &lan {{latency: 1us, bandwidth: 1Gbit/s}}}}\n"
                       f"  - {{name: B, hosts: 2, lan: *lan}}\n"
                       f"wan: [{{between: [A, B], latency: 1ms, bandwidth: 1Gbit/s}}]\n"), field="aliases"))
    out.append(Case("merge-key", "topology",
                    _b("x: &base {latency: 1us, bandwidth: 1Gbit/s}\nintra_host:\n  <<: *base\n"
                       f"sites:\n  - {site()}\n"), field="aliases"))
    out.append(Case("anchor-only", "pap", _b("arrivals: &a [0, 1, 2, 3]\n"), code=0))
    for levels in (3, 5, 12):
        out.append(Case(f"bomb-{levels}-levels", "pap",
                        _b("\n".join(laughs(levels, 4, "0")) + f"\narrivals: *l{levels - 1}\n"),
                        field="aliases"))
    return out


def nesting_cases() -> list[Case]:
    out = []
    for depth in (65, 1000, 100000):
        out.append(Case(f"deep-flow-{depth}", "pap", _b("arrivals: " + "[" * depth + "]" * depth + "\n")))
        out.append(Case(f"deep-flow-{depth}-topo", "topology", _b("sites: " + "[" * depth + "]" * depth + "\n")))
    block = "".join(f"{'  ' * i}k{i}:\n" for i in range(200)) + "  " * 200 + "v\n"
    out.append(Case("deep-block-mapping", "topology", _b(block)))
    out.append(Case("deep-mapping-flow", "pap", _b("arrivals: " + "{a: " * 70 + "1" + "}" * 70 + "\n")))
    # one value more than a YAML input may hold
    out.append(Case("too-many-values", "pap", _b("arrivals: [" + "0," * schemas.MAX_NODES + "0]\n"),
                    field="too many values"))
    out.append(Case("long-list", "pap", _b("arrivals: [" + ", ".join(["0"] * 5000) + "]\n"),
                    field="arrivals"))
    # just under the limit, the one mistake at the very end
    n = schemas.MAX_NODES - 10
    out.append(Case("late-error-pap", "pap", _b("arrivals: [" + "0, " * (n - 1) + "-1]\n"),
                    field="expected 4 arrival times"))
    h = 250  # 2 h^2 = 125,000 values
    row = "[" + ", ".join(["1"] * h) + "]"
    bad = "[" + ", ".join(["1"] * (h - 2)) + ", -5, 1]"  # off the diagonal (which is unused)
    hosts = ", ".join(f"{{name: h{i}, site: A}}" for i in range(h))
    out.append(Case("late-error-matrix", "topology",
                    _b(f"hosts: [{hosts}]\nmatrix:\n  latency: [{', '.join([row] * h)}]\n"
                       f"  bandwidth: [{', '.join([row] * (h - 1) + [bad])}]\n"),
                    field=f"matrix.bandwidth[{h - 1}][{h - 2}]"))
    return out


HUGE_INT = str(10 ** 400)
HUGE_DIGITS = "9" * 5000  # beyond Python's 4300-digit int conversion limit


def numeric_cases() -> list[Case]:
    out = []
    for label, value, code in (
            ("huge-int", HUGE_INT, 2), ("huge-digits", HUGE_DIGITS, 2), ("exp-string", '"1e999999999"', 2),
            ("exp-seconds", '"1e999999999 s"', 2), ("float-overflow", "1e400", 2), ("nan", ".nan", 2),
            ("inf", ".inf", 2), ("minus-inf", "-.inf", 2), ("negative", "-1", 2), ("neg-zero", "-0.0", 0),
            ("tiny", "1e-320", 0), ("tiny-string", '"1e-999999999 s"', (0, 2)), ("big", "1e308", 2),
            ("hex-huge", "0x" + "f" * 2000, 2), ("sexagesimal", "1:00:00", 0),
            ("bool", "true", 2), ("null", "null", 2), ("list", "[1]", 2), ("map", "{a: 1}", 2),
            ("unit-unknown", '"5 parsec"', 2), ("empty-string", '""', 2), ("long-string", '"' + "9" * 100000 + '"', 2)):
        field = None if label == "huge-digits" else "arrivals[1]"
        out.append(Case(f"arrival-{label}", "pap", _b(f"arrivals: [0, {value}, 0, 0]\n"), code=code, field=field))
        lan = f"lan: {{latency: {value}, bandwidth: 1Gbit/s}}"
        field = None if label == "huge-digits" else "sites[0].lan.latency"
        out.append(Case(f"latency-{label}", "topology", topo(site(lan=lan)), code=code, field=field))
    for label, value, code in (("zero", "0", 2), ("negative", "-1Gbit/s", 2), ("denormal", "1e-320", 2),
                               ("nan", ".nan", 2), ("inf", ".inf", 2), ("exp", '"1e999999999 Gbit/s"', 2),
                               ("huge-int", HUGE_INT, 2), ("petabit", "10Pbit/s", 2), ("one-bit", "1bit/s", 0),
                               ("bits-typo", '"1 Gbit"', 2)):
        lan = f"lan: {{latency: 1us, bandwidth: {value}}}"
        out.append(Case(f"bandwidth-{label}", "topology", topo(site(lan=lan)), code=code,
                        field="sites[0].lan.bandwidth"))
    for key, value, code in (("tcp_window", HUGE_INT, 2), ("tcp_window", '"1e999999999"', 2),
                             ("tcp_window", "0", 2), ("tcp_window", "-5", 2), ("tcp_window", "4MiB", 0),
                             ("eager_limit", "1e30", 2), ("eager_limit", "1.5", 2), ("eager_limit", ".nan", 2),
                             ("eager_limit", "64KiB", 0)):
        out.append(Case(f"{key}-{value[:12].strip(chr(34))}", "topology", topo(site(), f"{key}: {value}\n"),
                        code=code, field=key))
    # host and rank counts
    for label, hosts, code, field in (
            ("hosts-float", "4.0", 0, None), ("hosts-fraction", "4.5", 2, "hosts"), ("hosts-string", '"4"', 2, "hosts"),
            ("hosts-zero", "0", 2, "hosts"), ("hosts-negative", "-3", 2, "hosts"),
            ("hosts-50000", "50000", 2, "at most 2048 hosts"), ("hosts-huge", HUGE_INT, 2, "at most 2048 hosts"),
            ("hosts-1e300", "1e300", 2, "hosts"), ("hosts-bool", "true", 2, "hosts"), ("hosts-empty-list", "[]", 2, "hosts"),
            ("hosts-nan", ".nan", 2, "hosts")):
        out.append(Case(label, "topology", topo(site(hosts=hosts)), code=code, field=field))
    names = "[" + ", ".join(f"h{i}" for i in range(3000)) + "]"
    out.append(Case("hosts-list-3000", "topology", topo(site(hosts=names)), field="at most 2048 hosts"))
    for label, extra, code, field in (
            ("ranks-per-host-huge", f"placement: {{ranks_per_host: {HUGE_INT}}}\n", 2, "ranks_per_host"),
            ("ranks-per-host-big", "placement: {ranks_per_host: 100000}\n", 2, "ranks_per_host"),
            ("ranks-per-host-zero", "placement: {ranks_per_host: 0}\n", 2, "ranks_per_host"),
            ("ranks-per-host-float", "placement: {ranks_per_host: 2.0}\n", 0, None),
            ("placement-order", "placement: {order: diagonal}\n", 2, "order")):
        out.append(Case(label, "topology", topo(site(), extra), code=code, field=field, args=("pools",)))
    # a topology for 4 hosts given --ranks 5, and an arrival pattern for 3 given --ranks 4
    out.append(Case("too-few-hosts", "topology", topo(site(hosts="4")), field="placement", args=("--ranks", "5")))
    out.append(Case("pattern-too-short", "pap", _b("arrivals: [0, 1, 2]\n"), field="expected 4 arrival times"))
    return out


def encoding_cases() -> list[Case]:
    rng = random.Random(22)
    out = []
    for i in range(6):
        out.append(Case(f"garbage-{i}", "pap" if i % 2 else "topology",
                        bytes(rng.randrange(256) for _ in range(rng.choice((16, 700, 5000))))))
    good_pap = "arrivals: [0, 1, 2, 3]\n"
    good_topo = f"sites:\n  - {site()}\n"
    for kind, good in (("pap", good_pap), ("topology", good_topo)):
        out += [
            Case(f"{kind}-invalid-utf8", kind, _b(good) + b"name: \xff\xfe\xc3\x28\n", field="UTF-8"),
            Case(f"{kind}-latin1", kind, _b(good) + "description: caf\u00e9\n".encode("latin-1"), field="UTF-8"),
            Case(f"{kind}-nul", kind, _b(good) + b"description: a\x00b\n", field="NUL"),
            Case(f"{kind}-utf8-bom", kind, b"\xef\xbb\xbf" + _b(good), code=0),
            Case(f"{kind}-utf16-bom", kind, good.encode("utf-16"), field="UTF-16"),
            Case(f"{kind}-utf16be", kind, b"\xfe\xff" + good.encode("utf-16-be"), field="UTF-16"),
            Case(f"{kind}-tabs", kind, _b(good.replace("  - ", "\t- ").replace("arrivals: ", "arrivals:\n\t")),
                 field="line"),
            Case(f"{kind}-tab-indent", kind, _b("name: x\ndescription:\n\tdeep: 1\n" + good), field="line"),
            Case(f"{kind}-empty", kind, b"", field="empty"),
            Case(f"{kind}-newline", kind, b"\n\n", field="empty"),
            Case(f"{kind}-comment", kind, b"# nothing here\n", field="empty"),
            Case(f"{kind}-doc-start", kind, b"---\n", field="empty"),
            Case(f"{kind}-tilde", kind, b"~\n", field="empty"),
            Case(f"{kind}-two-docs", kind, _b(good + "---\n" + good), field="line"),
            Case(f"{kind}-scalar", kind, b"hello\n"),
            Case(f"{kind}-list", kind, b"- 1\n- 2\n"),
            Case(f"{kind}-duplicate-key", kind, _b(good + good.split("\n")[0] + "\n"), field="twice"),
            Case(f"{kind}-unknown-field", kind, _b(good + "colour: blue\n"), field="colour"),
            Case(f"{kind}-python-tag", kind, _b("name: !!python/object/apply:os.system [echo hi]\n" + good)),
            Case(f"{kind}-binary-tag", kind, _b("description: !!binary aGVsbG8=\n" + good), field="description"),
            Case(f"{kind}-timestamp", kind, _b("name: 2001-12-14\n" + good), field="name"),
            Case(f"{kind}-int-key", kind, _b("1: 2\n" + good)),
            Case(f"{kind}-complex-key", kind, _b("? [a, b]\n: 1\n" + good)),
            Case(f"{kind}-long-name", kind, _b(f"name: {'n' * 2_000_000}\n" + good), code=0),
            Case(f"{kind}-long-key", kind, _b(f"{'k' * 1_000_000}: 1\n" + good)),
            Case(f"{kind}-unterminated", kind, _b(good + 'description: "never closed\n'), field="line"),
            Case(f"{kind}-control-chars", kind, _b(good + "name: \x1b[31mred\n"), field="line"),
        ]
    out.append(Case("pap-unit-number", "pap", _b("unit: 5\narrivals: [0, 1, 2, 3]\n"), field="unit"))
    out.append(Case("pap-unit-parsec", "pap", _b("unit: parsec\narrivals: [0, 1, 2, 3]\n"), field="unit"))
    out.append(Case("pap-string-row", "pap", _b('arrivals: "0 1 2 3"\n'), field="arrivals"))
    out.append(Case("pap-both", "pap", _b("arrivals: [0, 1, 2, 3]\niterations: [[0, 1, 2, 3]]\n"),
                    field="iterations"))
    out.append(Case("topo-sites-mapping", "topology", b"sites: {}\n", field="sites"))
    out.append(Case("topo-long-host-name", "topology",
                    topo(site(), f"placement: {{hosts: [{'h' * 500000}]}}\n"), field="placement.hosts[0]"))
    out.append(Case("topo-long-unit", "topology", topo(site(lan="lan: {latency: '1 " + "x" * 300000 + "', bandwidth: 1Gbit/s}")),
                    field="sites[0].lan.latency"))
    return out


def size_cases() -> list[Case]:
    # one byte over the limit (a comment, so that only the size is wrong)
    big = b"arrivals: [0, 1, 2, 3]\n#" + b"x" * (MAX_INPUT_BYTES - 24) + b"\n"
    return [Case("over-size-limit", "pap", big, field="too large")]


def message_cost_cases() -> list[Case]:
    """message_costs (inputs/msgcosts.py): numeric extremes in factors and sizes, wrong
    shapes, unknown classes, and a table of the largest size a float64 cannot hold."""
    out = []
    seg = "{{from: {f}, latency_factor: {l}, bandwidth_factor: {b}}}"
    for label, f, lat, bw, code, field in (
            ("ok", "0", "2", "0.5", 0, None),
            ("from-huge", HUGE_INT, "1", "1", 2, "message_costs.all[0].from"),
            ("from-exp", '"1e999999999"', "1", "1", 2, "message_costs.all[0].from"),
            ("from-nan", ".nan", "1", "1", 2, "message_costs.all[0].from"),
            ("lat-inf", "0", ".inf", "1", 2, "latency_factor"), ("lat-nan", "0", ".nan", "1", 2, "latency_factor"),
            ("lat-zero", "0", "0", "1", 2, "latency_factor"), ("lat-neg", "0", "-1", "1", 2, "latency_factor"),
            ("lat-huge", "0", HUGE_INT, "1", 2, "latency_factor"), ("lat-string", "0", '"2"', "1", 2, "latency_factor"),
            ("bw-denormal", "0", "1", "1e-320", 2, "bandwidth_factor"), ("bw-bool", "0", "1", "true", 2, "bandwidth_factor"),
            ("bw-null", "0", "1", "null", 2, "bandwidth_factor"), ("bw-list", "0", "1", "[1]", 2, "bandwidth_factor")):
        body = f"message_costs:\n  all: [{seg.format(f=f, l=lat, b=bw)}]\n"
        out.append(Case(f"msgcosts-{label}", "topology", topo(site(), body), code=code, field=field))
    for label, body, field in (
            ("not-a-map", "message_costs: 5\n", "message_costs"),
            ("table-not-list", "message_costs: {all: 5}\n", "message_costs.all"),
            ("unknown-class", "message_costs: {sitez: []}\n", "message_costs.sitez"),
            ("unknown-site", "message_costs: {'wan:A:Q': []}\n", "unknown site"),
            ("preset-bad", "message_costs: {preset: [1]}\n", "message_costs.preset"),
            ("segments-300", "message_costs: {all: [" + ", ".join(seg.format(f=i, l=1, b=1) for i in range(300)) + "]}\n",
             "at most 256 segments")):
        out.append(Case(f"msgcosts-{label}", "topology", topo(site(), body), field=field))
    return out


def link_cases() -> list[Case]:
    """Wide-area links (inputs/wan_links.py): many sites, links and long routes (a route
    is resolved for every ordered pair of sites), numeric extremes, an XML platform."""
    out = []

    def sites(n, hosts=1):
        return "sites:\n" + "".join(f"  - {{name: s{i}, hosts: {hosts}, {LAN}}}\n" for i in range(n))

    def star(n):
        return "links:\n" + "".join(f"  - {{name: l{i}, between: [s{i}, hub], latency: 1ms, "
                                     f"bandwidth: 1Gbit/s}}\n" for i in range(n))
    out.append(Case("links-star-200", "topology", _b(sites(200) + star(200)), code=0))
    out.append(Case("links-star-300", "topology", _b(sites(300) + star(300)), field="at most 256 sites"))
    chain = "links:\n" + "".join(f"  - {{name: c{i}, between: [s{i}, s{i + 1}], latency: 1ms, "
                                  f"bandwidth: 1Gbit/s}}\n" for i in range(255))
    out.append(Case("links-chain-256", "topology", _b(sites(256) + chain), field="cross more than"))
    many = "links:\n" + "".join(f"  - {{name: m{i}, between: [s0, s1], latency: 1ms, bandwidth: 1Gbit/s}}\n"
                                 for i in range(5000))
    out.append(Case("links-5000", "topology", _b(sites(2) + many), field="at most 4096 links"))
    two = sites(2, 2) + star(2)
    for label, extra, code, field in (
            ("route-10000-hops", "routes: [{from: s0, to: s1, links: [" + ", ".join(["l0"] * 10000) + "]}]\n",
             0, None),
            ("via-5000", "routes: [{between: [s0, s1], via: [" + ", ".join(["hub", "s0"] * 2500) + "]}]\n",
             2, "routes[0].via"),
            ("route-latency-inf", "routes: [{from: s0, to: s1, links: [l0], latency: .inf}]\n", 2,
             "routes[0].latency"),
            ("route-back-string", "routes: [{from: s0, to: s1, links: [{link: l0, back: 'yes'}]}]\n", 2,
             "routes[0].links[0]"),
            ("route-links-empty", "routes: [{from: s0, to: s1, links: []}]\n", 2, "routes[0].links"),
            ("route-self", "routes: [{between: [s0, s0], via: [hub]}]\n", 2, "routes[0].between")):
        out.append(Case(f"links-{label}", "topology", _b(two + extra), code=code, field=field))
    for label, value, field in (("bw-denormal", "1e-320", "links[0].bandwidth"),
                                ("bw-huge", HUGE_INT, "links[0].bandwidth"),
                                ("lat-nan", ".nan", "links[0].latency")):
        key = "bandwidth" if "bw" in label else "latency"
        other = "latency: 1ms" if key == "bandwidth" else "bandwidth: 1Gbit/s"
        out.append(Case(f"links-{label}", "topology",
                        _b(sites(2) + f"links: [{{name: x, between: [s0, s1], {other}, {key}: {value}}}]\n"),
                        field=field))
    out.append(Case("links-long-name", "topology",
                    _b(sites(2) + f"links: [{{name: {'n' * 300000}, between: [s0, s1], latency: 1ms, "
                                  f"bandwidth: 1Gbit/s}}]\nroutes: [{{from: s0, to: s1, links: [x]}}]\n"),
                    field="routes[0].links[0]: unknown link 'x'"))
    out.append(Case("simgrid-platform-xml", "topology",
                    _b("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                       "<platform version=\"4.1\">\n  <zone id=\"w\" routing=\"Full\"/>\n</platform>\n"),
                    field="SimGrid platform XML"))
    return out


CASES = (alias_cases() + nesting_cases() + numeric_cases() + encoding_cases() + size_cases()
         + message_cost_cases() + link_cases())
assert len({c.name for c in CASES}) == len(CASES), "case names are unique"


def argv_for(case: Case, path: Path, out: Path) -> list[str]:
    if case.args[:1] == ("pools",):
        return ["pools", str(path)]
    ranks = list(case.args) if case.args else ["--ranks", "4"]
    opt = "--topology" if case.kind == "topology" else "--pap"
    return ["compile", "--algorithm", "ring", *ranks, "--bytes", "1KiB", opt, str(path),
            "-o", str(out / "x.sched")]


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def check(case: Case, code: int, err: str, path: Path, out: Path, elapsed: float) -> None:
    assert "Traceback" not in err, err
    assert code in (case.code if isinstance(case.code, tuple) else (case.code,)), (case.name, code, err[-2000:])
    assert elapsed < TIME_LIMIT_S, f"{case.name}: {elapsed:.1f} s"
    if code == 0:
        assert listing(out) in ([], ["x.sched"]), listing(out)
        return
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err[:2000]
    line = lines[0]
    assert line.startswith("collsched: error: ") and len(line) < 1000, line[:2000]
    assert path.name in line, line
    if case.field:
        assert case.field in line, line
    assert listing(out) == [], "nothing written"


def test_corpus_size():
    kinds = [c.kind for c in CASES]
    assert len(CASES) >= 100 and kinds.count("topology") >= 40 and kinds.count("pap") >= 40
    assert sum(1 for c in CASES if "bomb" in c.name or "alias" in c.name) >= 10


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_yaml_in_process(case, tmp_path, capsys):
    path = tmp_path / f"{case.name}.yaml"
    path.write_bytes(case.body)
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.process_time()  # CPU seconds: a loaded machine does not make a case fail
    code = main(argv_for(case, path, out))
    elapsed = time.process_time() - t0
    _, err = capsys.readouterr()
    check(case, code, err, path, out, elapsed)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert peak < GIB, f"peak RSS {peak / GIB:.2f} GiB"


SUBPROCESS = ["bomb-arrivals", "aliased-numbers", "hosts-50000", "arrival-huge-int",
              "latency-exp-seconds", "deep-flow-100000", "pap-invalid-utf8", "topology-utf8-bom"]


def collsched_command() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "collsched"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "collsched"]


@pytest.mark.parametrize("name", SUBPROCESS)
def test_hostile_yaml_subprocess(name, tmp_path):
    case = next(c for c in CASES if c.name == name)
    path = tmp_path / f"{case.name}.yaml"
    path.write_bytes(case.body)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "compiler"))
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(collsched_command() + argv_for(case, path, out), capture_output=True,
                          text=True, timeout=60, env=env)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child's CPU seconds
    elapsed = (ru.ru_utime + ru.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    # a fresh interpreter pays its imports (about a second): the case itself stays short
    check(case, proc.returncode, proc.stderr, path, out, elapsed - 1.0 if elapsed > 1 else elapsed)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    assert peak < GIB, f"peak RSS of a child {peak / GIB:.2f} GiB"
