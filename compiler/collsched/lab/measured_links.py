"""The measured topology in the links form (class form with `links:` and `routes:`,
docs/inputs.md): what `collsched measure` writes by default once the capacity probes ran
(lab/capacity.py); `--form matrix` keeps the per-pair matrices instead.

Sites carry their measured LAN (median latency and one-flow bandwidth of their host pairs)
as `lan`; hosts are listed at the top level with their site, ranks placed on them by
`placement.hosts`; links and routes come from capacity.network_description; the routes'
own latencies make every site pair's latency the measured one.
"""
from __future__ import annotations

import json

import yaml

from ..files import write_atomic
from . import capacity as capmod


def _time(s: float) -> str:
    s = float(s)
    if s >= 1.0:
        return f"{s:.9g}s"
    if s >= 1e-3:
        return f"{s * 1e3:.9g}ms"
    return f"{s * 1e6:.9g}us"


def _rate(bps: float) -> str:
    bits = float(bps) * 8
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.9g}{unit}"
    return f"{bits:.9g}bit/s"


def _name(x: str) -> str:
    """A name as YAML: plain when safe, else a JSON string (JSON strings are YAML)."""
    text = str(x)
    plain = text and all(c.isalnum() or c in "-_." for c in text) and not text[0].isdigit() \
        and text.lower() not in ("true", "false", "null", "yes", "no", "on", "off", "y", "n", "~")
    return text if plain else json.dumps(text)


def measured_fields(meas, overheads: bool) -> dict:
    """The fields a measured topology carries in either form besides its links or matrix:
    os(m) and g(m) (when asked for) and the size-dependent costs."""
    out = {}
    if overheads:
        for key, val in (("send_overhead", meas.send_overhead), ("gap", meas.gap)):
            if val is not None:
                out[key] = {"a": val[0], "per_byte": val[1]}
    if meas.message_costs is not None:
        out["message_costs"] = meas.message_costs.to_dict()
    return out


def links_form(meas, cap, name: str, comment: str | None = None, overheads: bool = False) -> str:
    """The YAML text of the measured topology in the links form."""
    net = capmod.network_description(cap)
    out = []
    for line in (comment or "").splitlines():
        out.append(f"# {line}".rstrip())
    out.append(f"name: {_name(name)}")
    out.append("duplex: full")
    if net["tcp_window"]:
        out.append(f"tcp_window: {int(round(net['tcp_window']))}   # bytes: one flow at most window / (2 L); "
                   f"inferred from {len(cap.window_pairs)} window-limited site pair(s)")
    else:
        out.append("# tcp_window: none written: no site pair's single flow was window-limited")
    if meas.intra_host is not None:
        out.append(f"intra_host: {{latency: {_time(meas.intra_host[0])}, bandwidth: {_rate(meas.intra_host[1])}}}")
    out.append("sites:")
    for s in cap.sites:
        lat, bw = cap.lan[s]
        out.append(f"  - {{name: {_name(s)}, lan: {{latency: {_time(lat)}, bandwidth: {_rate(bw)}}}}}")
    out.append("hosts:")
    for h, site in zip(meas.hosts, meas.host_site):
        out.append(f"  - {{name: {_name(h)}, site: {_name(site)}}}")
    if len(cap.sites) > 1:
        out.append("links:")
        for lk in net["links"]:
            out.append(f"  # {lk['_note']}")
            parts = [f"name: {_name(lk['name'])}"]
            if "between" in lk:
                parts.append(f"between: [{', '.join(_name(x) for x in lk['between'])}]")
            parts += [f"latency: {_time(lk['latency'])}", f"bandwidth: {_rate(lk['bandwidth'])}",
                      f"sharing: {lk['sharing']}"]
            if lk.get("bandwidth_back") is not None:
                parts.append(f"bandwidth_back: {_rate(lk['bandwidth_back'])}")
            out.append(f"  - {{{', '.join(parts)}}}")
        out.append("routes:")
        for r in net["routes"]:
            hops = ", ".join(f"{{link: {_name(h['link'])}, back: true}}" if isinstance(h, dict) else _name(h)
                             for h in r["links"])
            extra = f", latency: {_time(r['latency'])}" if r.get("latency") else ""
            out.append(f"  - {{from: {_name(r['from'])}, to: {_name(r['to'])}, links: [{hops}]{extra}}}")
    out.append("placement:")
    out.append("  hosts: [" + ", ".join(_name(meas.hosts[h]) for h in meas.rank_host) + "]")
    tail = measured_fields(meas, overheads)
    if tail:
        out.append(yaml.safe_dump(tail, sort_keys=False, default_flow_style=None, width=100).rstrip())
    return "\n".join(out) + "\n"


def write_links_form(meas, cap, path, name: str | None = None, comment: str | None = None,
                     overheads: bool = False) -> None:
    from pathlib import Path

    path = Path(path)
    write_atomic(path, links_form(meas, cap, name or path.stem, comment, overheads))
