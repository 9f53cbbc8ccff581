"""Device-health and fabric parsers, on the real captures of the lent H100 first
(docs/examples/health-real-h100/), then on the public formats (nccl-tests NET/IB lines, perftest)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llmb.hw import ParseError, parse
from llmb.hw.fabric import parse_ib_write_bw, parse_nccl_debug
from llmb.hw.health import parse_kernel_log, parse_nvidia_params, parse_pci_acs
from llmb.hw.probes import acs_from_config
from llmbctl.hw.check import parse_checked

H100 = Path(__file__).resolve().parents[4] / "docs" / "examples" / "health-real-h100"


def real(name: str) -> str:
    return (H100 / name).read_text()


# --------------------------------------------------------------------------- real H100 captures


def test_real_h100_smi_qx_health_fields():
    g = parse(real("smi-qx.txt"))["gpus"][0]
    assert (g["pcie_gen_current"], g["pcie_gen_max"], g["pcie_width_current"], g["pcie_width_max"]) == (5, 5, 16, 16)
    assert g["ecc_uncorrectable_volatile"] == 0 and g["ecc_uncorrectable_aggregate"] == 0
    assert g["clocks_event_reasons_active"] == ["gpu_idle"]
    assert g["vbios_version"] == "96.00.DA.00.0C" and g["inforom_image"] == "G520.0200.00.05"


@pytest.mark.parametrize("name", ["smi-q.txt", "smi-q-performance.txt"])
def test_real_h100_text_q_reads_the_same_reasons_as_the_xml(name):
    assert parse(real(name))["gpus"][0]["clocks_event_reasons_active"] == ["gpu_idle"]


def test_real_h100_ecc_section_alone():
    g = parse(real("smi-q-ecc.txt"))["gpus"][0]
    assert g["ecc_uncorrectable_volatile"] == 0 and g["ecc_uncorrectable_aggregate"] == 0


def test_real_h100_query_health_fields_agree_with_the_xml():
    q = parse(real("query-health.txt"))["gpus"][0]
    x = parse(real("smi-qx.txt"))["gpus"][0]
    assert q["vbios_version"] == x["vbios_version"]
    assert int(q["pcie_link_width_max"]) == x["pcie_width_max"] == 16  # --query-gpu keeps text values


def test_real_h100_kernel_log_has_the_driver_and_no_xid():
    res = parse(real("dmesg.txt"))
    assert res["kind"] == "kernel-log" and res["lines"] > 300 and res["events"] == []
    assert parse(real("dmesg-xid.txt"))["events"] == []  # grep found nothing (exit status 1)


def test_real_h100_nvidia_params_stream_memops_off():
    p = parse(real("nvidia-params.txt"))
    assert p["kind"] == "nvidia-params"
    assert p["params"]["EnableStreamMemOPs"] == 0 and p["params"]["NvLinkDisable"] == 1
    assert p["registry_dwords"] == {}


def test_real_h100_modules_without_peermem():
    assert parse(real("proc-modules.txt"))["modules"] == ["nvidia_uvm", "nvidia"]


def test_real_h100_nvlink_errors_empty_when_nvlink_is_disabled():
    res = parse_checked(real("nvlink-e.txt"))
    assert res.kind == "nvidia-smi-nvlink-errors" and res.facts["gpus"] == [] and res.ok


def _configs(text: str) -> dict[str, bytes]:
    blocks = re.split(r"^/sys/bus/pci/devices/(\S+) .*$", text.split("\n\n", 1)[1], flags=re.M)
    return {blocks[i]: bytes(int(x, 16) for x in blocks[i + 1].split()) for i in range(1, len(blocks), 2)}


def test_real_h100_config_space_walk_finds_no_acs():
    configs = _configs(real("pci-config.txt"))
    gpu = configs["0000:00:06.0"]
    assert len(gpu) == 4096 and gpu[:2] == b"\xde\x10"  # NVIDIA, extended space readable as root
    assert all(acs_from_config(c) is None for c in configs.values())


def test_acs_control_read_from_a_bridge_config():
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | (1 << 16) | (0x140 << 20)).to_bytes(4, "little")  # AER, next 0x140
    config[0x140:0x144] = (0x000D | (1 << 16)).to_bytes(4, "little")  # ACS, last
    config[0x144:0x146] = (0x007F).to_bytes(2, "little")
    config[0x146:0x148] = (0x001D).to_bytes(2, "little")  # SV, RR, CR, UF
    assert acs_from_config(bytes(config)) == (0x7F, 0x1D)
    listing = parse_pci_acs("0000:40:01.1 class=0x060400 acs=cap=0x007f,ctrl=0x001d\n"
                            "0000:41:00.0 class=0x030200 acs=none\n")
    assert listing["devices"][0]["enabled"] == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    assert listing["devices"][0]["bridge"] and not listing["devices"][1]["bridge"]


def test_real_h100_all_reduce_perf_shows_the_socket_fallback():
    text = real("all-reduce-perf-1gpu.txt")
    dbg = parse(text, "nccl-debug")
    vm = dbg["hosts"]["vm"]
    assert vm["ib_missing"] and vm["network"] == "Socket" and vm["transport"] == "socket"
    assert vm["socket_ifaces"] == [{"index": 0, "name": "eth0", "address": "192.0.2.2"}]
    assert dbg["ranks"] == [{"rank": 0, "host": "vm", "device": 0, "bus": "0000:00:06", "model": "NVIDIA H100 80GB HBM3"}]
    perf = parse(text)
    assert perf["kind"] == "nccl-tests" and perf["out_of_bounds"] == 0 and perf["rows"][-1]["size_bytes"] == 268435456


# --------------------------------------------------------------------------- public formats

XID_LINES = """\
[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
               NVRM: (PCI ID: 10de:26b5) installed in this system has
               NVRM: fallen off the bus and is not responding to commands.
[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.
Feb 14 05:03:41 gpu-1 kernel: NVRM: Xid (PCI:0000:44:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[ 9021.5] NVRM: Xid (PCI:0000:1b:00): 48, pid=1234, name=python3, An uncorrectable double bit error
"""


def test_kernel_log_xid_forms():
    ev = parse_kernel_log(XID_LINES)["events"]
    assert [(e["bus"], e["xid"]) for e in ev] == [("0000:b3:00", 79), ("0000:01:00", 79), ("0000:44:00", 79),
                                                 ("0000:1b:00", 48)]
    assert ev[0]["time"] == "1843.308145" and ev[2]["time"] == "Feb 14 05:03:41"


def test_nvlink_errors_counters():
    text = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n\t Link 0: Replay Errors: 0\n\t Link 0: Recovery Errors: 1\n"
            "\t Link 0: CRC Errors: 7\n\t Link 1: Replay Errors: 0\n")
    res = parse(text)
    assert res["kind"] == "nvidia-smi-nvlink-errors"
    assert res["gpus"][0]["links"][0] == {"link": 0, "replay": 0, "recovery": 1, "crc": 7}
    with pytest.raises(ParseError):
        parse(text.replace(": 7", ": seven"), "nvidia-smi-nvlink-errors")


def test_nvidia_params_registry_dwords():
    p = parse_nvidia_params('EnableStreamMemOPs: 1\nRegistryDwords: "PeerMappingOverride=1;"\n')
    assert p["params"]["EnableStreamMemOPs"] == 1 and p["registry_dwords"] == {"PeerMappingOverride": "1"}


NET_IB = """\
qh100-gpu20:39636:39690 [7] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/IB/SHARP [2]mlx5_4:1/IB/SHARP [3]mlx5_5:1/IB/SHARP [RO]; OOB ibp25s0:10.20.0.120<0>
qh100-gpu20:39636:39690 [7] NCCL INFO Using network IBext
[0] h100clust-worker-1:227602:227792 [0] NCCL INFO Channel 01/0 : 16[0] -> 0[0] [receive] via NET/IBext_v8/7/GDRDMA
roce-a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
roce-a:1:1 [0] NCCL INFO Using network IB
roce-a:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/1
#
# Avg bus bandwidth    : 41.3
"""


def test_nccl_debug_ib_and_roce_hosts():
    hosts = parse_nccl_debug(NET_IB)["hosts"]
    assert [d["name"] for d in hosts["qh100-gpu20"]["ib_devices"]] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]
    assert hosts["qh100-gpu20"]["transport"] == "ib"
    assert hosts["h100clust-worker-1"]["net_channels"] == {"IBext_v8": 1} and hosts["h100clust-worker-1"]["gdr_channels"] == 1
    assert hosts["roce-a"]["transport"] == "roce" and hosts["roce-a"]["nics_used"] == [1]


IB_WRITE_BW_GB = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 3
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 8          224958464        0.00               0.48   \t\t   7.498617
---------------------------------------------------------------------------------------
"""


def test_ib_write_bw_gbits_and_megabytes():
    res = parse(IB_WRITE_BW_GB)
    assert res["kind"] == "ib-write-bw" and res["device"] == "mlx5_0" and res["link_type"] == "Ethernet"
    assert res["gid_index"] == 3 and res["avg_gbps"] == 0.48 and res["errors"] == []
    mb = parse_ib_write_bw(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
                           " 1024       1000             0.00               5544.28\t\t   5.677340\n")
    assert mb["avg_gbps"] == pytest.approx(46.51, abs=0.01)


def test_ib_write_bw_port_down_and_no_server():
    down = parse_ib_write_bw(" Port number 1 state is Down\n Couldn't set the link layer\n")
    assert down["errors"][0]["text"] == "Port number 1 state is Down" and down["rows"] == []
    with pytest.raises(ParseError):
        parse_ib_write_bw("hello\n")


# --------------------------------------------------------------------------- the probes' own run on the H100

LOCAL = H100 / "verify-local"


def test_real_h100_verify_local_run_passes_health_and_refuses_deepep():
    import json

    from llmbctl import verify as V
    from llmbctl.hw.facts import build_facts, read_bundle

    facts = build_facts(read_bundle(str(LOCAL / "bundle")), "nvidia")
    assert facts["health"]["modules"] == ["nvidia_uvm", "nvidia"]
    assert [a["acs"] for a in facts["health"]["acs"]] == ["unreadable", "none"]  # recorded before 256-byte = none
    assert facts["health"]["kernel_log"]["events"] == []
    profile = V.load_profile("h100-x1")
    checks = {c["id"]: c for c in V.verify(facts, profile, deepep=True)}
    assert all(checks[i]["ok"] for i in ("health.xid.GPU0", "health.ecc.GPU0", "health.throttle.GPU0", "health.pcie.GPU0"))
    assert checks["deepep.driver_options"]["found"] == "EnableStreamMemOPs 0, PeerMappingOverride unset"
    recorded = json.loads((LOCAL / "verify-result.json").read_text())
    assert recorded["failed"] == ["deepep.driver_options"]


def _fn(path: Path, cls: str, vendor: str, config: bytes) -> None:
    path.mkdir(parents=True)
    (path / "class").write_text(cls + "\n")
    (path / "vendor").write_text(vendor + "\n")
    (path / "config").write_bytes(config)


def test_acs_listing_takes_the_bridges_above_gpus_and_nics_only(tmp_path):
    from llmb.hw.probes import acs_listing

    acs = bytearray(4096)
    acs[0x100:0x104] = (0x000D | (1 << 16)).to_bytes(4, "little")
    acs[0x106:0x108] = (0x000C).to_bytes(2, "little")  # ReqRedir + CmpltRedir
    devs = tmp_path / "devices" / "pci0000:00"
    _fn(devs / "0000:00:01.0", "0x060400", "0x8086", bytes(acs))  # root port above the GPU
    _fn(devs / "0000:00:01.0" / "0000:01:00.0", "0x030200", "0x10de", bytes(4096))  # the GPU
    _fn(devs / "0000:00:02.0", "0x060400", "0x8086", bytes(acs))  # a bridge with nothing of ours below
    bus = tmp_path / "bus"
    bus.mkdir()
    for bdf, rel in (("0000:00:01.0", "0000:00:01.0"), ("0000:01:00.0", "0000:00:01.0/0000:01:00.0"),
                     ("0000:00:02.0", "0000:00:02.0")):
        (bus / bdf).symlink_to(devs / rel)
    listing = acs_listing(str(bus))
    assert listing == ("0000:00:01.0 class=0x060400 acs=cap=0x0000,ctrl=0x000c\n"
                       "0000:01:00.0 class=0x030200 acs=none\n")
    from llmbctl import verify as V

    facts = {"devices": [], "health": {"acs": parse_pci_acs(listing)["devices"]}}
    bad = [c for c in V.health_checks(facts, V.load_profile("h800-hgx8")) if not c["ok"]]
    assert [(c["id"], c["found"]) for c in bad] == [("health.acs", "0000:00:01.0")]


def test_peermem_judged_only_on_the_gpus_kernel():
    from llmbctl import verify as V

    profile = V.load_profile("h800-hgx8")

    def peermem(mods):
        return next(c for c in V.health_checks({"devices": [], "health": {"modules": mods}}, profile)
                    if c["id"] == "health.peermem")

    assert not peermem(["nvidia", "nvidia_uvm"])["ok"]
    assert peermem(["nvidia", "nvidia_peermem"])["ok"] and not peermem(["nvidia", "nvidia_peermem"]).get("skipped")
    assert peermem(["overlay", "br_netfilter"]).get("skipped")  # a container on a kernel without the GPUs
