"""The cache index (docs/cache.md): round trip, and every field's check naming line and field."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsched.cache.index import (HEADER, MAX_BYTES, MAX_RANKS, Entry, format_index, parse_index,
                                   pattern_tuple)
from collsched.errors import InputError

GOOD = "entry a.sched allgather 4 1024 2048 solver+0x10 0123456789abcdef 0 0.001 7 0.0,0.5,0.001,2e-05"
REG = "entry b.sched allgather 4 1024 2048 solver+0x10 - regular - 12 -"


def parse(*lines):
    return parse_index("\n".join([HEADER, *lines]) + "\n", "DIR/index")


def test_parse_good_lines():
    e, r = parse("# a comment", GOOD, REG)
    assert e == Entry("a.sched", "allgather", 4, 1024, 2048, "solver+0x10", "0123456789abcdef", 0, 0.001,
                      7, (0.0, 0.5, 0.001, 2e-05))
    assert r.regular and r.pattern is None and r.radius is None and r.uses == 12
    assert format_index([e, r]).splitlines()[1:] == [GOOD, REG]


def _bad(field_index, value):
    parts = GOOD.split(" ")
    parts[field_index] = value
    return " ".join(parts)


@pytest.mark.parametrize("index,value,field", [
    (1, "../x.sched", "FILE"), (1, ".hidden", "FILE"), (1, "index", "FILE"),
    (2, "bcast", "COLLECTIVE"), (3, "0", "RANKS"), (3, str(MAX_RANKS + 1), "RANKS"), (3, "04", "RANKS"),
    (3, "+4", "RANKS"), (4, "-1", "BYTES_MIN"), (5, "1000", "BYTES_MAX"),
    (5, str(MAX_BYTES + 1), "BYTES_MAX"), (6, "", "SITE"), (6, "x" * 256, "SITE"),
    (6, "caf\u00e9", "SITE"), (7, "0123456789ABCDEF", "TOPOLOGY"), (7, "0123", "TOPOLOGY"), (8, "-1", "CLASS"), (8, "x", "CLASS"),
    (9, "nan", "RADIUS"), (9, "inf", "RADIUS"), (9, "-0.1", "RADIUS"), (9, "-", "RADIUS"),
    (10, "1.5", "USES"), (10, "-3", "USES"),
    (11, "0,1,2", "PATTERN"), (11, "0,1,2,3,4", "PATTERN"), (11, "1,1,2,3", "PATTERN"),
    (11, "0,nan,1,1", "PATTERN"), (11, "0,-1,1,1", "PATTERN"), (11, "-", "PATTERN"),
])
def test_every_field_is_checked(index, value, field):
    with pytest.raises(InputError) as e:
        parse("# c", _bad(index, value))
    assert e.value.source == "DIR/index" and e.value.field == f"line 3: {field}", e.value.line()


@pytest.mark.parametrize("text,field", [
    ("collsched-cache 2\n", "line 1"), ("", "line 1"),
    (f"{HEADER}\nfoo bar\n", "line 2"),
    (f"{HEADER}\n{GOOD} extra\n", "line 2: entry"),
    (f"{HEADER}\n{REG.replace('regular - 12 -', 'regular 0.1 12 -')}\n", "line 2: RADIUS"),
    (f"{HEADER}\n{REG.replace('12 -', '12 0,0,0,0')}\n", "line 2: PATTERN"),
    (f"{HEADER}\n{GOOD}\n{GOOD.replace(' 0 0.001', ' 1 0.001')}\n", "line 3: FILE"),  # FILE twice
    (f"{HEADER}\n{REG}\n{REG.replace('b.sched', 'c.sched')}\n", "line 3: CLASS"),  # two regular
    (f"{HEADER}\n{GOOD}\n{GOOD.replace('a.sched', 'c.sched')}\n", "line 3: CLASS"),  # class 0 twice
])
def test_rules_across_lines(text, field):
    with pytest.raises(InputError) as e:
        parse_index(text, "DIR/index")
    assert e.value.field == field, e.value.line()


def test_same_class_number_in_another_group_is_fine():
    other = GOOD.replace("a.sched", "c.sched").replace(" 1024 2048 ", " 4096 8192 ")
    assert len(parse(GOOD, other, REG)) == 3
    v = REG.replace("b.sched allgather", "v.sched allgatherv")  # another collective: its own regular
    assert len(parse(REG, v)) == 2


_sites = st.one_of(st.just("*"), st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                                          max_size=40))
_offsets = st.floats(min_value=0, max_value=1e3, allow_nan=False, allow_infinity=False)


@st.composite
def entries(draw):
    ranks = draw(st.integers(1, 12))
    lo = draw(st.integers(0, MAX_BYTES))
    hi = draw(st.integers(lo, MAX_BYTES))
    regular = draw(st.booleans())
    pattern = None if regular else pattern_tuple(draw(st.lists(_offsets, min_size=ranks, max_size=ranks)))
    return Entry(draw(st.from_regex(r"[0-9a-f]{16}\.sched", fullmatch=True)),
                 draw(st.sampled_from(["allgather", "allgatherv"])), ranks, lo, hi, draw(_sites),
                 draw(st.one_of(st.just("-"), st.from_regex(r"[0-9a-f]{16}", fullmatch=True))),
                 None if regular else draw(st.integers(0, 1000)),
                 None if regular else draw(_offsets), draw(st.integers(0, 2**63 - 1)), pattern)


@settings(max_examples=150, deadline=None)
@given(st.lists(entries(), max_size=6, unique_by=(lambda e: e.file, lambda e: (*e.group, e.klass))))
def test_round_trip(es):
    text = format_index(es, "a comment\nover two lines")
    assert parse_index(text, "x") == es
    assert text.startswith(HEADER + "\n# a comment\n# over two lines\n")


def test_pattern_tuple_makes_the_smallest_zero():
    assert pattern_tuple([3.0, 1.0, 2.5]) == (2.0, 0.0, 1.5)
