"""Cross-node fabric checks (tag fabric): RDMA rails (ib_write_bw), NCCL's transport and all-reduce,
Ascend HCCN pings; the rails verify records for stage 0."""

from __future__ import annotations

import json
import re

from .base import _check, _skip

_FABRIC_TYPES = {"allreduce_busbw_gbps": (int, float), "ib_write_bw_gbps": (int, float), "transport": str}


def fabric_config(profile: dict) -> dict:
    """Thresholds of the fabric.* checks: the profile's `fabric:` mapping over defaults derived from
    its rdma section (ib_write_bw per rail: 85% of rdma.rate_gbps; transport from rdma.link_layer)."""
    rdma = profile.get("rdma") or {}
    layer = rdma.get("link_layer")
    cfg = {"allreduce_busbw_gbps": None,
           "ib_write_bw_gbps": round(rdma["rate_gbps"] * 0.85, 1) if rdma.get("rate_gbps") else None,
           "transport": {"InfiniBand": "ib", "Ethernet": "roce"}.get(layer) if layer else None}
    given = profile.get("fabric") or {}
    if not isinstance(given, dict):
        raise ValueError(f"platform profile {profile.get('name')!r}: fabric must be a mapping")
    for key, value in given.items():
        want = _FABRIC_TYPES.get(key)
        if want is None:
            raise ValueError(f"platform profile {profile.get('name')!r}: fabric.{key} is not known; "
                             f"known: {', '.join(sorted(_FABRIC_TYPES))}")
        if value is not None and (not isinstance(value, want) or isinstance(value, bool)):
            raise ValueError(f"platform profile {profile.get('name')!r}: fabric.{key} has the wrong type: {value!r}")
        if key == "transport" and value not in (None, "ib", "roce"):
            raise ValueError(f"platform profile {profile.get('name')!r}: fabric.transport must be ib or roce, "
                             f"found {value!r}")
        cfg[key] = value
    return cfg


def _port_down(parsed: dict | None) -> str | None:
    for e in (parsed or {}).get("errors") or []:
        if re.search(r"Port number \d+ state is (?!Active)\w+", e["text"]):
            return e["text"]
    return None


def fabric_checks(profile: dict, nodes: dict, ibbw: dict | None = None, allreduce: dict | None = None) -> dict:
    """The fabric.* checks of every host, from the probe outputs (llmb_fabric_probe.py).

    nodes: {host: {"hostname": node's own name, "rails": [NIC names], "next": host its clients test}};
    ibbw: {host: the ibbw JSON of that host}; allreduce: {"host": launcher, "rc", "output"} of the
    launcher. Returns {host: [checks]}; a rail that is down is reported on the host that owns it.
    """
    from llmb.hw._text import ParseError
    from llmb.hw.fabric import parse_ib_write_bw, parse_nccl_debug
    from llmb.hw.host import parse_nccl_tests

    cfg = fabric_config(profile)
    out: dict = {h: [] for h in nodes}
    thr = cfg["ib_write_bw_gbps"]

    def parse_bw(text):
        try:
            return parse_ib_write_bw(text or "")
        except ParseError as exc:
            return {"rows": [], "errors": [{"line": None, "text": str(exc)}], "avg_gbps": None}

    down: set = set()
    for host, res in (ibbw or {}).items():
        if res.get("missing"):
            out[host].append(_check("fabric.ib_write_bw", False, "perftest ib_write_bw runs on every rail",
                                    res["missing"], "install perftest (`apt-get install perftest`) on every node"))
            continue
        for srv in res.get("servers") or []:
            why = _port_down(parse_bw(srv.get("output")))
            if why:
                down.add((host, srv["device"]))
                out[host].append(_check(f"fabric.rail.{srv['device']}", False, f"rail {srv['device']} Active",
                                        f"down: {why}", f"{host} {srv['device']}: the port is not up; check the "
                                        "cable / optics and the switch port (`ibstat`, `ibv_devinfo`), for InfiniBand "
                                        "that a subnet manager runs; NCCL leaves this rail out or hangs at start"))
    for host, res in (ibbw or {}).items():
        peer = nodes.get(host, {}).get("next")
        for cli in res.get("clients") or []:
            dev = cli["device"]
            parsed = parse_bw(cli.get("output"))
            cid = f"fabric.ib_write_bw.{dev}"
            exp = f">= {thr} Gb/s to {peer} {dev}" if thr else f"runs to {peer} {dev}"
            why = _port_down(parsed)
            if why and (host, dev) in down:
                continue  # its server side said so already
            if why:
                down.add((host, dev))
                out[host].append(_check(f"fabric.rail.{dev}", False, f"rail {dev} Active", f"down: {why}",
                                        f"{host} {dev}: the port is not up; check the cable / optics and the switch "
                                        "port (`ibstat`), for InfiniBand that a subnet manager runs"))
                continue
            if (peer, dev) in down:
                out[host].append(_skip(cid, exp, f"the peer's rail is down (reported on {peer})"))
                continue
            avg = parsed.get("avg_gbps")
            if avg is None:
                err = "; ".join(e["text"] for e in parsed.get("errors", [])[:2]) or f"exit status {cli.get('rc')}"
                out[host].append(_check(cid, False, exp, err, f"RDMA between {host} {dev} and {peer} {dev} does not "
                                        "work: run the same ib_write_bw pair by hand; check addresses / routes of "
                                        "the rail, RoCE GID (`show_gids`) and MTU on both ends and the switch"))
                continue
            ok = thr is None or avg >= thr
            gid = f", GID index {parsed['gid_index']}" if parsed.get("gid_index") is not None else ""
            out[host].append(_check(cid, ok, exp, f"{avg:.1f} Gb/s (link {parsed.get('link_type')}{gid})",
                                    f"{host} {dev} <-> {peer} {dev} is slow: check both ports' rate (`ibstat`), "
                                    "PCIe width of the NIC, errors on the switch port (`perfquery -x`), RoCE PFC/ECN; "
                                    "the slowest rail bounds every all-reduce"))
    if allreduce is not None and allreduce.get("skipped"):
        out.setdefault(allreduce.get("host"), []).append(_skip("fabric.allreduce", "all_reduce_perf across all nodes",
                                                               allreduce["skipped"]))
    elif allreduce is not None:
        launcher = allreduce.get("host")
        text = allreduce.get("output") or ""
        if allreduce.get("missing"):
            out.setdefault(launcher, []).append(_check("fabric.allreduce", False, "all_reduce_perf across all nodes",
                                                       allreduce["missing"], "install nccl-tests (rccl-tests on AMD) "
                                                       "built with MPI=1 and Open MPI on every node"))
            return out
        try:
            dbg = parse_nccl_debug(text)
        except ParseError:
            dbg = None
        by_name = {n.get("hostname", h).split(".")[0]: h for h, n in nodes.items()}
        want_t = cfg["transport"]
        if dbg is not None:
            for nccl_host, rec in dbg["hosts"].items():
                host = by_name.get(nccl_host.split(".")[0], nccl_host)
                out.setdefault(host, [])
                t = rec["transport"]
                exp = {"ib": "NET/IB (InfiniBand)", "roce": "NET/IB over RoCE", None: "NET/IB (InfiniBand or RoCE)"}[want_t]
                ok = t in ((want_t,) if want_t else ("ib", "roce"))
                devs = ",".join(f"{d['name']}:{d['port']}/{d['link_layer']}" for d in rec["ib_devices"]) or "none"
                found = f"{t or 'not seen'} (network {rec['network']}; IB devices {devs}"
                found += "; NET/IB: no device found)" if rec["ib_missing"] else ")"
                out[host].append(_check("fabric.transport", ok, exp, found,
                                        f"NCCL on {host} fell back to TCP sockets (decode is many times slower): "
                                        "check that the RDMA devices are visible (`ibv_devices`), NCCL_IB_DISABLE is "
                                        "unset, NCCL_IB_HCA names existing ports, nvidia_peermem / the IB verbs "
                                        "libraries (libibverbs, rdma-core) are installed" if t == "socket" else
                                        f"NCCL on {host} used {t}; the profile expects {exp}"))
                rails = nodes.get(host, {}).get("rails")
                if rails and rec["ib_devices"]:
                    used = {d["name"] for d in rec["ib_devices"]}
                    missing = [r for r in rails if r.split(":")[0] not in used]
                    out[host].append(_check("fabric.nccl_rails", not missing, "NCCL uses every rail: " + ",".join(rails),
                                            ("missing " + ",".join(missing) + "; uses " + devs) if missing else devs,
                                            f"NCCL on {host} did not open {','.join(missing)}: the port is down or "
                                            "excluded by NCCL_IB_HCA; see fabric.rail.* and ibstat"))
        perf = None
        try:
            perf = parse_nccl_tests(text)
        except ParseError:
            pass
        ar = cfg["allreduce_busbw_gbps"]
        names = ", ".join(sorted(nodes))
        if perf is None or allreduce.get("rc") not in (0, None):
            tail = " | ".join(ln.strip() for ln in text.strip().splitlines()[-3:])[:400]
            out.setdefault(launcher, []).append(_check(
                "fabric.allreduce", False, f"all_reduce_perf across {names} completes",
                f"exit status {allreduce.get('rc')}: {tail or 'no output'}",
                "run the same mpirun by hand from the first node with NCCL_DEBUG=INFO; a hang at start is "
                "usually one bad rail or a firewall between the nodes (see the port check)"))
        else:
            busbw = perf.get("peak_busbw_gbps") or perf.get("avg_busbw_gbps") or 0.0
            wrong = perf.get("out_of_bounds") or 0
            ok = (ar is None or busbw >= ar) and not wrong
            out.setdefault(launcher, []).append(_check(
                "fabric.allreduce", ok, f"all-reduce across {names}" + (f": >= {ar} GB/s bus bandwidth" if ar else "")
                + ", 0 wrong values", f"{busbw:.1f} GB/s peak bus bandwidth, {wrong} wrong values",
                "the cross-node all-reduce is slow or wrong: see fabric.transport / fabric.ib_write_bw.* for the "
                "slow host and rail"))
    return out


def hccn_addresses(facts: dict) -> dict:
    """{NPU index (str): its HCCN address} of a node whose port is up (the fabric play's ping targets)."""
    out = {}
    for _name, rec in sorted((facts.get("hccn") or {}).items()):
        if rec.get("ipaddr") and rec.get("link") in (None, "UP") and rec.get("device") is not None:
            out[str(rec["device"])] = rec["ipaddr"]
    return out


def hccn_ping_pairs(hosts: list[str], addresses: dict) -> dict:
    """Which NPU of each host pings which peer: {host: [{"device", "peer", "address"}]}.

    NPU i on a node pings NPU i on every other node: the pairs HCCL's rings use between nodes (rank r
    of a node talks to the same local rank of the next node; vllm-ascend's checklist pings the peer
    NPUs' addresses) and, on the usual per-NPU-index RoCE planes, the only pairs that share a subnet."""
    out: dict = {h: [] for h in hosts}
    for h in hosts:
        mine = addresses.get(h) or {}
        for dev in sorted(mine, key=int):
            for peer in hosts:
                addr = (addresses.get(peer) or {}).get(dev)
                if peer != h and addr:
                    out[h].append({"device": int(dev), "peer": peer, "address": addr})
    return out


def hccn_ping_checks(pairs: dict, results: dict) -> dict:
    """fabric.hccn_ping.NPU<i>.<peer> per pair: the ping from NPU i of host to NPU i of peer answered
    every packet. results: {host: the hccn-ping JSON of llmb_fabric_probe.py}. {host: [checks]}."""
    # the node-side parsers, imported absolutely (verify.py may move to the controller side)
    from llmb.hw._text import ParseError
    from llmb.hw.ascend import parse_hccn

    out: dict = {h: [] for h in pairs}
    for host, want in pairs.items():
        res = results.get(host) or {}
        if res.get("missing"):
            out[host].append(_check("fabric.hccn_ping", False, "hccn_tool -ping runs on every NPU", res["missing"],
                                    "install the Ascend driver tools on the node"))
            continue
        got = {(p.get("device"), p.get("address")): p for p in res.get("pings") or []}
        for w in want:
            cid = f"fabric.hccn_ping.NPU{w['device']}.{w['peer']}"
            exp = f"NPU{w['device']} of {host} reaches NPU{w['device']} of {w['peer']} ({w['address']}): 3 of 3 replies"
            raw = got.get((w["device"], w["address"]))
            if raw is None:
                out[host].append(_check(cid, False, exp, "not run (the fabric probe did not answer for it)",
                                        "re-run verify.yml --tags fabric"))
                continue
            try:
                dev = parse_hccn(raw.get("output") or "", device=w["device"])["devices"]
                ping = next((p for d in dev for p in d.get("pings", [])), None)
            except ParseError as exc:
                ping, why = None, str(exc)
            else:
                why = " | ".join(ln.strip() for ln in (raw.get("output") or "").strip().splitlines()[-2:])[:300]
            if ping is None or ping.get("transmitted") is None:
                found = f"exit status {raw.get('rc')}: {why or 'no output'}"
            else:
                lost = "; ".join(x["text"] for x in ping["lost"][:3])
                found = (f"{ping['received']} of {ping['transmitted']} replies ({ping['loss_pct']:.2f}% packet loss)"
                         + (f": {lost}" if lost else ""))
            ok = bool(ping and ping.get("ok"))
            out[host].append(_check(cid, ok, exp, found,
                                    f"{host} NPU{w['device']} cannot reach {w['peer']} NPU{w['device']} over the HCCN "
                                    "network: compare both ports (`hccn_tool -i N -link -g`, `-net_health -g`), their "
                                    "addresses, netmask and gateway (`-ip -g`, `-gateway -g`), the switch port (`-lldp -g`)"
                                    " and that TLS is the same on both ends (`-tls -g`); HCCL hangs at its first "
                                    "cross-node collective over this pair"))
    return out


def rail_record(nodes: dict, ibbw: dict | None) -> dict:
    """Per host, the rails NCCL should use (NCCL_IB_HCA) and the RoCE GID index ib_write_bw reported:
    {host: {"llmb_rdma_rails": [...], "llmb_rdma_gid_index": N | None}} (rails that are down left out)."""
    from llmb.hw._text import ParseError
    from llmb.hw.fabric import parse_ib_write_bw

    rec = {}
    for host, n in nodes.items():
        rails = list(n.get("rails") or [])
        gid = None
        for side in ((ibbw or {}).get(host) or {}).get("servers") or []:
            try:
                p = parse_ib_write_bw(side.get("output") or "")
            except ParseError:
                continue
            if _port_down(p):
                rails = [r for r in rails if r != side["device"]]
            elif p.get("link_type") == "Ethernet" and p.get("gid_index") is not None and gid is None:
                gid = p["gid_index"]
        if rails:
            rec[host] = {"llmb_rdma_rails": rails, "llmb_rdma_gid_index": gid}
    return rec


RAILS_FILE = "llmb_rdma.yml"  # <inventory>/host_vars/<host>/llmb_rdma.yml, written by the fabric tag


def rails_yaml(host: str, rec: dict) -> str:
    """The host_vars file verify records the rails in (read back by stage 0: llmb_rdma_rails)."""
    rails = ", ".join(json.dumps(str(r)) for r in rec["llmb_rdma_rails"])  # JSON strings are YAML strings
    gid = rec.get("llmb_rdma_gid_index")
    return ("---\n"
            f"# Written by the verify stage (tag fabric) for {host}: the RDMA rails ib_write_bw and NCCL used.\n"
            "# Stage 0 plans NCCL_IB_HCA from them (NCCL_IB_GID_INDEX on RoCE); commit this file with the\n"
            "# inventory, edit it to pin other rails, delete it to let verify learn them again.\n"
            f"llmb_rdma_rails: [{rails}]\n"
            + (f"llmb_rdma_gid_index: {int(gid)}\n" if gid is not None else ""))
