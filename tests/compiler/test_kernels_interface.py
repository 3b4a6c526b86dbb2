"""The kernels' one interface: kernels.h declares each prototype, the C definitions agree
with it, each keyword wrapper names the same parameters, every caller in the package passes
exactly those names, and a call that does not fit the prototype raises before reaching C."""
import ast
from pathlib import Path

import numpy as np
import pytest

from collsched import kernels

PACKAGE = Path(kernels.__file__).resolve().parents[1]


def test_header_declares_every_kernel_once_and_the_wrappers_match():
    protos = kernels.parse_prototypes(kernels.HEADER.read_text())
    assert set(protos) == set(kernels.WRAPPERS) == {
        "progress_completes", "dag_order", "dag_time", "leaf_pool", "input_pool", "ring",
        "fluid_step"}
    assert kernels.wrapper_mismatches() == []


def test_definitions_match_the_header():
    """Names too (the C compiler checks only the types of a definition against its declaration)."""
    protos = kernels.parse_prototypes(kernels.HEADER.read_text())
    defined = {}
    for c in sorted(kernels.HERE.glob("*.c")):
        defined.update(kernels.parse_prototypes(c.read_text(), definitions=True))
    assert defined == protos


def test_a_wrapper_that_disagrees_is_reported(monkeypatch):
    def ring(*, n, n_items, flor):  # a renamed and missing parameter
        return 0

    monkeypatch.setitem(kernels.WRAPPERS, "ring", ring)
    wrong = kernels.wrapper_mismatches()
    assert len(wrong) == 1 and wrong[0].startswith("cs_ring: the wrapper takes")
    monkeypatch.setitem(kernels.WRAPPERS, "extra", ring)
    assert "cs_extra: not declared in kernels.h" in kernels.wrapper_mismatches()


def test_parser_rejects_what_it_cannot_type():
    with pytest.raises(ValueError, match="cannot read parameter"):
        kernels.parse_prototypes("int64_t cs_x(int64_t n, float *a);")
    with pytest.raises(ValueError, match="cannot read parameter"):
        kernels.parse_prototypes("int64_t cs_x(const int64_t n);")
    got = kernels.parse_prototypes("/* int64_t cs_y(int64_t a); */\nint64_t cs_x(int64_t n,\n"
                                  "  const double *a, uint8_t *b);")
    assert [str(p) for p in got["x"].params] == ["int64_t n", "const double *a", "uint8_t *b"]


def kernel_calls():
    """(file, line, wrapper name, keyword names, positional count) of every call of a
    wrapper through the package's module, anywhere in the package: kernels.X(...), or
    kernels.bind(kernels.X, ...) (its arguments checked once for repeated calls)."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "kernels"):
                continue
            name, positional = node.func.attr, len(node.args)
            if name == "bind" and node.args and isinstance(node.args[0], ast.Attribute):
                name, positional = node.args[0].attr, positional - 1
            if name in kernels.WRAPPERS:
                names = [k.arg for k in node.keywords]
                calls.append((path.relative_to(PACKAGE), node.lineno, name, names, positional))
    return calls


def test_every_caller_names_exactly_the_prototypes_parameters():
    """Checked from the source, so it fails even where the library is not built."""
    protos = kernels.parse_prototypes(kernels.HEADER.read_text())
    calls = kernel_calls()
    assert {c[2] for c in calls} == set(protos)  # every kernel has a caller
    for path, line, name, names, positional in calls:
        where = f"{path}:{line} calls {name}"
        assert positional == 0 and None not in names, f"{where} with unnamed arguments"
        assert sorted(names) == sorted(protos[name].names), \
            f"{where} with {sorted(set(names) ^ set(protos[name].names))} not as kernels.h declares"


def progress_fields(**change):
    z = np.zeros(2, np.int64)
    fields = dict(nranks=1, rank=np.zeros(0, np.int64), offsets=z, blocking=np.zeros(0, np.int64),
                  first=np.zeros(1, np.int64), last=np.zeros(1, np.int64),
                  dep0=np.zeros(0, np.int64), dep1=np.zeros(0, np.int64), dep2=np.zeros(0, np.int64))
    fields.update(change)
    return fields


def test_a_call_that_fits_the_prototype_runs():
    assert kernels.progress_completes(**progress_fields()) == 1


@pytest.mark.parametrize("change,message", [
    (dict(offsets=np.zeros(2, np.int32)), "C-contiguous int64 array"),
    (dict(offsets=np.zeros(4, np.int64)[::2]), "contiguous: False"),
    (dict(offsets=[0, 0]), "takes a numpy array"),
    (dict(nranks=1.0), "takes an integer"),
    (dict(nranks=np.ones(1, np.int64)), "takes an integer"),
])
def test_a_call_that_does_not_fit_raises(change, message):
    with pytest.raises(TypeError, match=message):
        kernels.progress_completes(**progress_fields(**change))


def test_names_are_checked():
    fields = progress_fields()
    with pytest.raises(TypeError):
        kernels.progress_completes(**fields, extra=1)
    del fields["dep2"]
    with pytest.raises(TypeError):
        kernels.progress_completes(**fields)
    with pytest.raises(TypeError):  # positional
        kernels.progress_completes(*progress_fields().values())


def test_outputs_must_be_writable():
    ro = np.zeros(1)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="must be writable"):
        kernels.dag_time(n=0, edge=np.zeros(0, np.int64), eoff=np.zeros(0), zero_col=np.ones(5, np.uint8),
                        n_extra=0, xoff=np.zeros(1, np.int64), xedge=np.zeros(1, np.int64),
                        node=np.zeros(0), perm=np.zeros(0, np.int64), n_on_wan=0,
                        on_wan=np.zeros(0, np.int64), link_of=np.zeros(0, np.int64), passes=4,
                        base=np.zeros(0), work_f=np.zeros(0), work_i=np.zeros(0, np.int64),
                        start=ro, end=np.zeros(1))
