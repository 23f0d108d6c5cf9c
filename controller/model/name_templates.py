"""A preset's shape with the operator's names: name and port templates, explicit renames.

    names: {host: "gpu-{pod_letter}{rack:02}-{host}", rtsw: "leaf-{pod}-{rack}"}
    ports: {host: "eth{nic}", rtsw_down: "Ethernet{i}"}
    rename: {"ctsw-p0-c0": "spine-00"}     # by the preset's name; wins over a template

turn a regular Clos into the cable list it would be (every device, every cable, with ports),
which then loads as any inventory does (controller.model.inventory), so both forms give the
same fabric for the same wiring. Fields a template may use:

    host       pod, pod_letter, rack, host, rack_id, host_id
    rtsw       pod, pod_letter, rack, rack_id, slot  (slot: its NICs n % S; 0 with one a rack)
    ctsw       pod, pod_letter, ctsw, ctsw_id        (ctsw: its index in the pod = its plane)
    atsw       plane, atsw, atsw_id                  (atsw: its index in the plane)
    pod        pod, pod_letter                       (the pod's name in the exports)
    rack       pod, pod_letter, rack, rack_id        (the rack's name in the exports)
    host port  (ports.host)      nic, i
    rtsw_down  host, nic, i      rtsw_up    ctsw, member, i
    ctsw_down  rack, slot, member, i                 ctsw_up    atsw, member, i
    atsw_down  pod, member, i

`i` is the port's index on its device, down ports first, then up ports (a host's: its NIC;
an RTSW's uplinks follow its host ports), so `Ethernet{i}` names a whole switch. Names a
template does not give are the preset's; ports default to the lab's interface names (nic0,
h0n0, c0, r0, a0, p0, with k/m and the member for parallel links, r0s1 for slot 1 of a rack
of several RTSWs). A cable the preset does not install (across planes) is not listed.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

from controller.errors import FabricError
from controller.model.fabric import ACCESS, RACK, Fabric
from controller.model.inventory import NOT_A_DEVICE_NAME, Cable, Device, usable_device_name
from controller.model.validation import MAX_NAME

NAME_FIELDS = {
    "host": ("pod", "pod_letter", "rack", "host", "rack_id", "host_id"),
    "rtsw": ("pod", "pod_letter", "rack", "rack_id", "slot"),
    "ctsw": ("pod", "pod_letter", "ctsw", "ctsw_id"),
    "atsw": ("plane", "atsw", "atsw_id"),
    "pod": ("pod", "pod_letter"),
    "rack": ("pod", "pod_letter", "rack", "rack_id"),
}
PORT_FIELDS = {
    "host": ("nic", "i"),
    "rtsw_down": ("host", "nic", "i"),
    "rtsw_up": ("ctsw", "member", "i"),
    "ctsw_down": ("rack", "slot", "member", "i"),
    "ctsw_up": ("atsw", "member", "i"),
    "atsw_down": ("pod", "member", "i"),
}


def _letters(n: int) -> str:
    """0 -> a, 25 -> z, 26 -> aa: a pod's letter."""
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(ord("a") + r) + out
    return out


def _check(template: object, where: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(template, str) or not template:
        raise FabricError(f"{where}: must be a non-empty template string, got {template!r}")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise FabricError(f"{where}: {template!r} is not a template ({err})") from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in allowed or conversion:
            raise FabricError(f"{where}: unknown field {{{field}}} in {template!r}; fields: "
                              f"{', '.join(allowed)}")  # fmt: skip
        if spec and any(int(w) > MAX_NAME for w in re.findall(r"\d+", spec)):
            raise FabricError(f"{where}: {{{field}:{spec}}} in {template!r} pads to more than "
                              f"{MAX_NAME} characters, the longest name")  # fmt: skip
    return template


def _fill(template: str, where: str, **fields: object) -> str:
    try:
        return template.format(**fields)
    except (ValueError, TypeError) as err:
        raise FabricError(f"{where}: {template!r}: {err}") from None


def named_cable_list(fabric: Fabric, names: Mapping[str, object] | None = None,
                     ports: Mapping[str, object] | None = None,
                     rename: Mapping[str, object] | None = None,
                     ) -> tuple[list[Device], list[Cable]]:  # fmt: skip
    """Every device and cable of the preset-built `fabric`, named by the templates and the
    renames (preset name -> operator name); FabricError names the template or rename at
    fault."""
    names, ports, rename = dict(names or {}), dict(ports or {}), dict(rename or {})
    for key in names:  # pod and rack: their names, carried by their devices
        if key not in NAME_FIELDS:
            raise FabricError(f"names: unknown kind {key!r}; kinds: {', '.join(NAME_FIELDS)}")
    for key in ports:
        if key not in PORT_FIELDS:
            raise FabricError(f"ports: unknown kind {key!r}; kinds: {', '.join(PORT_FIELDS)}")
    name_t = {k: _check(v, f"names.{k}", NAME_FIELDS[k]) for k, v in names.items()}
    port_t = {k: _check(v, f"ports.{k}", PORT_FIELDS[k]) for k, v in ports.items()}
    f = fabric
    R, H, N, C, A = (f.racks_per_pod, f.hosts_per_rack, f.nics_per_host, f.ctsws_per_pod,
                     f.atsws_per_plane)  # fmt: skip
    S = f.rtsws_per_rack
    K, L = f.rack_links, f.agg_links

    def node(kind: str, index: int, preset: str, **fields: object) -> str:
        if preset in rename:  # an explicit name wins over the template
            new = rename[preset]
            if not isinstance(new, str):
                raise FabricError(f"rename.{preset}: must be a string, got {new!r}")
            return _usable(new, f"rename.{preset}")
        t = name_t.get(kind)
        return preset if t is None else _usable(_fill(t, f"names.{kind}", **fields),
                                                f"names.{kind} ({t!r})")  # fmt: skip

    host_names = []
    for h in range(f.num_hosts):
        rack, hh = divmod(h, H)
        p, r = divmod(rack, R)
        host_names.append(node("host", h, f.host_name(h), pod=p, pod_letter=_letters(p),
                               rack=r, host=hh, rack_id=rack, host_id=h))  # fmt: skip
    rtsw_names = []
    for rtsw in range(f.num_rtsws):
        rack, slot = divmod(rtsw, S)
        p, r = divmod(rack, R)
        rtsw_names.append(node("rtsw", rtsw, f.rtsw_name(rtsw), pod=p, pod_letter=_letters(p),
                               rack=r, rack_id=rack, slot=slot))  # fmt: skip
    ctsw_names = []
    for i in range(f.num_ctsws):
        p, c = divmod(i, C)
        ctsw_names.append(node("ctsw", i, f.ctsw_name(i), pod=p, pod_letter=_letters(p), ctsw=c,
                               ctsw_id=i))  # fmt: skip
    atsw_names = []
    for i in range(f.num_atsws):
        c, j = divmod(i, A)
        atsw_names.append(node("atsw", i, f.atsw_name(i), plane=c, atsw=j, atsw_id=i))
    pod_names: list[str | None] = [None] * f.pods
    rack_names: list[str | None] = [None] * (f.pods * R)
    if "pod" in name_t:
        pod_names = [_fill(name_t["pod"], "names.pod", pod=p, pod_letter=_letters(p))
                     for p in range(f.pods)]  # fmt: skip
    if "rack" in name_t:
        rack_names = [_fill(name_t["rack"], "names.rack", pod=k // R, pod_letter=_letters(k // R),
                            rack=k % R, rack_id=k) for k in range(f.pods * R)]  # fmt: skip
    devices = ([Device(n, "host", rack=rack_names[h // H], pod=pod_names[h // (H * R)])
                for h, n in enumerate(host_names)]
               + [Device(n, "rtsw", rack=rack_names[i // S], pod=pod_names[i // (S * R)])
                  for i, n in enumerate(rtsw_names)]
               + [Device(n, "ctsw", pod=pod_names[i // C]) for i, n in enumerate(ctsw_names)]
               + [Device(n, "atsw") for n in atsw_names])  # fmt: skip
    known = set(rename) - {d for d in f.node_names}
    if known:
        raise FabricError(f"rename: no device {sorted(known)[0]!r} in the preset (rename "
                          "takes the preset's names, e.g. rtsw-p0-r0)")  # fmt: skip
    presets = ([f.host_name(h) for h in range(f.num_hosts)]
               + [f.rtsw_name(i) for i in range(f.num_rtsws)]
               + [f.ctsw_name(i) for i in range(f.num_ctsws)]
               + [f.atsw_name(i) for i in range(f.num_atsws)])  # fmt: skip
    seen: dict[str, str] = {}  # a name -> the preset device it names
    for d, preset in zip(devices, presets, strict=True):
        if d.name in seen:
            raise FabricError(f"names: two devices are both named {d.name!r} (the preset's "
                              f"{seen[d.name]} and {preset}): make the templates or renames "
                              "tell them apart")  # fmt: skip
        seen[d.name] = preset

    def port(kind: str, default: str, **fields: object) -> str:
        t = port_t.get(kind)
        return default if t is None else _fill(t, f"ports.{kind}", **fields)

    kinds, installed = f.link_kind, f.installed
    cables = []
    end_kinds: list[tuple[str, str]] = []  # the port kinds of each cable's two ends
    for link in range(f.num_links):
        if not installed[link]:
            continue
        gbps = float(f.capacity[2 * link])
        end_kinds.append(_END_KINDS.get(int(kinds[link]), ("ctsw_up", "atsw_down")))
        if kinds[link] == ACCESS:
            host, n = divmod(link, N)
            hh = host % H
            cables.append(Cable(
                host_names[host], port("host", f"nic{n}", nic=n, i=n),
                rtsw_names[int(f.rtsw_of_nic(link))],
                port("rtsw_down", f"h{hh}n{n}", host=hh, nic=n, i=hh * N + n), gbps))
        elif kinds[link] == RACK:
            rel = link - f.rack_base
            rtsw, rest = divmod(rel, C * K)
            c, k = divmod(rest, K)
            p, at = divmod(rtsw, R * S)  # at: the RTSW's index in its pod
            r, slot = divmod(at, S)
            km = f"k{k}" if K > 1 else ""
            down = f"r{r}{km}" if S == 1 else f"r{r}s{slot}{km}"
            cables.append(Cable(
                rtsw_names[rtsw], port("rtsw_up", f"c{c}{km}", ctsw=c, member=k, i=H * N + rest),
                ctsw_names[p * C + c],
                port("ctsw_down", down, rack=r, slot=slot, member=k, i=at * K + k), gbps))
        else:
            rel = link - f.agg_base
            ctsw, rest = divmod(rel, A * L)
            j, m = divmod(rest, L)
            p, c = divmod(ctsw, C)
            mm = f"m{m}" if L > 1 else ""
            cables.append(Cable(
                ctsw_names[ctsw],
                port("ctsw_up", f"a{j}{mm}", atsw=j, member=m, i=R * S * K + rest),
                atsw_names[c * A + j],
                port("atsw_down", f"p{p}{mm}", pod=p, member=m, i=p * L + m), gbps))
    _ports_apart(cables, end_kinds, port_t)
    return devices, cables


# the port kinds (ports: keys) of a cable's lower and upper end, by link kind
_END_KINDS = {ACCESS: ("host", "rtsw_down"), RACK: ("rtsw_up", "ctsw_down")}


def _ports_apart(cables: list[Cable], end_kinds: list[tuple[str, str]],
                 port_t: Mapping[str, str]) -> None:  # fmt: skip
    """FabricError naming the port template that gives two ports of one device one name
    (the default port names never do), rather than the cable list it makes."""
    if not port_t:
        return
    made: dict[tuple[str, str], str] = {}  # (device, port) -> the kind that named it
    for cab, kinds in zip(cables, end_kinds, strict=True):
        for dev, port, kind in ((cab.a, cab.a_port, kinds[0]), (cab.b, cab.b_port, kinds[1])):
            first = made.get((dev, port))
            if first is None:
                made[dev, port] = kind
                continue
            bad = kind if kind in port_t else first
            raise FabricError(f"ports.{bad}: {port_t[bad]!r} gives two ports of {dev} the name "
                              f"{port!r}: use the fields that tell them apart "
                              f"({', '.join(PORT_FIELDS[bad])})")  # fmt: skip


def _usable(name: str, where: str) -> str:
    """`name` if it can name a device (inventory's rule), else FabricError naming `where`."""
    if len(name) > MAX_NAME:  # said here, not as devices[i] of a list the file does not have
        raise FabricError(f"{where}: gives a name of {len(name):,} characters "
                          f"({name[:20]!r}...); at most {MAX_NAME}")  # fmt: skip
    if not usable_device_name(name):
        raise FabricError(f"{where}: {name!r} {NOT_A_DEVICE_NAME}")
    return name
