"""The one rule for a lab run's network model: what SimGrid gets, what the cost model predicts with.

SimGrid's network models (SimGrid 3.32, src/surf/network_cm02.cpp, network_smpi.cpp) all
run the CM02 max-min solver; they differ in the factors applied to each message:

* **CM02**: none. A message costs L + m / b, the cost model's physics. Predictions use the
  topology *without* its message_costs (CM02 ignores them; the run's notes say so).
* **SMPI**: piecewise factors by message size, smpi/lat-factor and smpi/bw-factor, and the
  sharing weight network/weight-S (8775 B by default). A topology that carries its own
  size-dependent costs (a measured one) with one table for every host pair gets exactly
  that table: the generated platform comes with --cfg=smpi/lat-factor and smpi/bw-factor
  (and network/weight-S when the topology gives it), so SimGrid runs the network the
  topology describes. Otherwise (no table, or the simgrid-smpi preset) SimGrid runs its
  calibrated defaults and predictions use those (msgcosts.SIMGRID_SMPI). Several tables
  (per link class) cannot be given to SimGrid, whose factors are global: refused.
* **LV08**: constant factors, latency x 13.01 and bandwidth x 0.97, weight-S 20537 B;
  predictions use a one-segment table with those.

SimGrid applies its factors to every message, a host's loopback too; the tables built
here therefore cover pairs on one host as well (class intra_host; the lab's placements
put one rank per host, where this does not matter).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..inputs import msgcosts

NETWORK_MODELS = ("CM02", "SMPI", "LV08")
# SimGrid 3.32, surf_network_model_init_LegrandVelho (src/surf/network_cm02.cpp).
LV08_LATENCY_FACTOR = 13.01
LV08_BANDWIDTH_FACTOR = 0.97
LV08_WEIGHT_S = 20537.0
LV08_TABLE = msgcosts.CostTable((0,), (LV08_LATENCY_FACTOR,), (LV08_BANDWIDTH_FACTOR,))
# SMPI's smpi/async-small-thresh: messages up to it go before their receive is posted.
SIMGRID_EAGER_LIMIT = 0
# SimGrid reads a threshold with std::stoi.
_MAX_THRESHOLD = 2**31 - 1


@dataclass(frozen=True)
class NetworkSetup:
    """A run's network: SimGrid's settings and the topology the cost models predict with."""

    model: str  # CM02 | SMPI | LV08
    topology: object  # Topology the predictions (and the compiler) use
    simgrid_cfg: tuple[str, ...]  # smpirun options: --cfg=network/model:... and the factors
    costs: str  # what the predictions' message costs are, in words (for records)
    notes: tuple[str, ...] = ()  # for the report
    changed: bool = False  # the predictions' message_costs differ from the topology file's

    def record(self) -> dict:
        """What every record states about the network."""
        return {"network_model": self.model, "message_costs": self.costs,
                "simgrid_cfg": list(self.simgrid_cfg)}


def check_model(model: str, option: str = "--network-model") -> str:
    if model not in NETWORK_MODELS:
        raise InputError(option, str(model)[:40], f"expected one of {', '.join(NETWORK_MODELS)}")
    return model


def _everywhere(table, host_site, weight_s: float, envelope_bytes: float = msgcosts.SMPI_ENVELOPE_BYTES):
    """One table on every host pair, the pairs on one host included (SimGrid's factors are
    global), looked up by payload + SMPI's 16-byte envelope as SimGrid does."""
    return msgcosts.build({"all": table, "intra_host": table}, host_site, weight_s,
                          envelope_bytes=envelope_bytes)


def _shares_hosts(topo) -> bool:
    return len(topo.rank_host) > 0 and int(np.bincount(np.asarray(topo.rank_host)).max()) > 1


def _own_table(topo):
    """The single table of a topology's own message_costs, or an InputError."""
    mc = topo.message_costs
    table = mc.single_table()
    if table is None:
        raise InputError(topo.source, "message_costs",
                         f"expected one table for every host pair under --network-model SMPI "
                         f"(SimGrid's smpi/lat-factor and smpi/bw-factor are global), got tables "
                         f"for {', '.join(mc.classes)}; run it under CM02 or give one 'all' table")
    if _shares_hosts(topo):
        diag = np.diag(mc.host_table)
        used = {int(diag[h]) for h in np.unique(np.asarray(topo.rank_host))}
        if any(k < 0 or mc.tables[k] != table for k in used):
            raise InputError(topo.source, "message_costs.intra_host",
                             "expected the same table for ranks on one host as for the others "
                             "under --network-model SMPI (SimGrid applies its factors to the "
                             "loopback too)")
    if table.starts[-1] - 1 > _MAX_THRESHOLD:
        raise InputError(topo.source, "message_costs",
                         f"expected segments starting below {_MAX_THRESHOLD + 1} bytes for "
                         f"SimGrid's smpi/lat-factor, got {table.starts[-1]}")
    return table


def network_setup(model: str, topo) -> NetworkSetup:
    """The rule: SimGrid's settings and the prediction topology for a network model.

    Under every model SMPI moves a message only once its receive is posted, whatever its
    size (smpi/async-small-thresh is 0; below smpi/send-is-detached-thresh the sender is
    merely done once it has issued the send: src/smpi/mpi/smpi_request.cpp). So the
    predictions take eager_limit 0: every message waits for its receive, as the cost
    model's rendezvous rule says (docs/semantics.md). With the MPI eager limit instead,
    ring at 37,448 B per rank on wan-3x16 was predicted at 0.14 of what SMPI measured."""
    setup = _factor_setup(model, topo)
    if setup.topology.eager_limit == SIMGRID_EAGER_LIMIT:
        return setup
    return dataclasses.replace(setup, topology=dataclasses.replace(
        setup.topology, eager_limit=SIMGRID_EAGER_LIMIT), changed=True)


def _factor_setup(model: str, topo) -> NetworkSetup:
    check_model(model)
    mc = topo.message_costs
    cfg = [f"--cfg=network/model:{model}"]
    if model == "CM02":
        notes = ()
        if mc is not None:
            notes = (f"CM02 ignores the topology's message-size-dependent costs "
                     f"({_describe(mc)}): SimGrid and the predictions use constant L + m / b.",)
        return NetworkSetup(model, topo.with_message_costs(None), tuple(cfg),
                            "none (constant L + m / b)", notes, changed=mc is not None)
    if model == "LV08":
        costs = _everywhere(LV08_TABLE, topo.host_site, LV08_WEIGHT_S)
        notes = ()
        if mc is not None:
            notes = (f"LV08 ignores the topology's message-size-dependent costs ({_describe(mc)}).",)
        return NetworkSetup(model, topo.with_message_costs(costs), tuple(cfg),
                            f"LV08: latency x {LV08_LATENCY_FACTOR}, bandwidth x "
                            f"{LV08_BANDWIDTH_FACTOR}, weight-S {LV08_WEIGHT_S:g} B", notes, changed=True)
    if mc is None or mc.preset:
        costs = _everywhere(msgcosts.SIMGRID_SMPI, topo.host_site, msgcosts.SIMGRID_SMPI_WEIGHT_S)
        return NetworkSetup(model, topo.with_message_costs(costs), tuple(cfg),
                            "SimGrid's SMPI defaults (smpi/lat-factor, smpi/bw-factor, weight-S "
                            f"{msgcosts.SIMGRID_SMPI_WEIGHT_S:g} B)", (), changed=True)
    table = _own_table(topo)
    lat, bw = table.simgrid_cfg(mc.envelope_bytes)  # the table's lookup size -> SimGrid's
    cfg += [f"--cfg=smpi/lat-factor:{lat}", f"--cfg=smpi/bw-factor:{bw}"]
    weight = msgcosts.SIMGRID_SMPI_WEIGHT_S
    if mc.weight_s > 0:
        weight = mc.weight_s
        cfg.append(f"--cfg=network/weight-S:{weight!r}")
    costs = _everywhere(table, topo.host_site, weight, mc.envelope_bytes)
    return NetworkSetup(model, topo.with_message_costs(costs), tuple(cfg),
                        f"the topology's own table ({len(table.starts)} segments) given to SimGrid "
                        f"as smpi/lat-factor and smpi/bw-factor, weight-S {weight:g} B"
                        + ("" if mc.weight_s > 0 else " (SimGrid's default)"),
                        (f"SimGrid ran the topology's own size-dependent costs ({_describe(mc)}).",),
                        changed=True)


def _describe(mc) -> str:
    if mc.preset:
        return f"preset {mc.preset}"
    return ", ".join(f"{c}: {len(t.starts)} segment{'s' if len(t.starts) > 1 else ''}"
                     for c, t in zip(mc.classes, mc.tables))


def smpirun_network_args(model: str, topo) -> list[str]:
    """The smpirun options for a network model on a topology (lab/measure.py's command line)."""
    return list(network_setup(model, topo).simgrid_cfg)


def _homogeneous_doc(topo) -> dict:
    """inputs.topology.homogeneous's cluster as a class-form topology document."""
    lat, bw = topo.host_latency, topo.host_bandwidth
    n = len(topo.hosts)
    doc = {"name": topo.name, "duplex": "full" if topo.full_duplex else "half",
           "sites": [{"name": topo.host_site[0], "hosts": n,
                      "lan": {"latency": f"{float(lat[0, 1 % n])!r} s",
                              "bandwidth": f"{float(bw[0, 1 % n])!r} B/s"}}],
           "intra_host": {"latency": f"{float(lat[0, 0])!r} s", "bandwidth": f"{float(bw[0, 0])!r} B/s"}}
    if topo.tcp_window is not None:
        doc["tcp_window"] = int(topo.tcp_window)
    return doc


def write_prediction_topology(setup: NetworkSetup, source: str | None, path: Path,
                              tcp_window: int | None = None) -> str | None:
    """A topology file for the compiler with the prediction costs (the source file with its
    message_costs section replaced and the run's TCP window), or the source itself when
    nothing changed. None: the homogeneous default (no file) with nothing to change."""
    if not setup.changed and tcp_window is None:
        return source
    import yaml

    from .. import resources
    from ..files import read_input, write_atomic

    if source is None:  # the homogeneous default, in class form: any P (a matrix caps at 255 hosts)
        doc = _homogeneous_doc(setup.topology)
    else:
        doc = yaml.safe_load(bytes(read_input(resources.topology_path(source), "topology")).decode("utf-8"))
    doc.setdefault("name", setup.topology.name)
    doc.pop("message_costs", None)
    if setup.topology.message_costs is not None:
        doc["message_costs"] = setup.topology.message_costs.to_dict()
    if tcp_window is not None:
        doc["tcp_window"] = int(tcp_window)
    doc["eager_limit"] = int(setup.topology.eager_limit)
    head = (f"# {Path(source).name if source else 'the homogeneous default'} with the message costs "
            f"of network model {setup.model}\n"
            "# (written by the collsched lab, lab/netmodel.py; do not edit)\n")
    write_atomic(path, head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100000))
    return str(path)
