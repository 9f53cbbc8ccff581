"""Every capture in ../shared/fixtures is classified, detected and parsed (or belongs to another stage)."""

import pytest
from conftest import FIXTURES, fixture_text
from llmb.hw import KINDS, ParseError, detect_kind, parse, split_capture

# Kind of every capture, by path. A new capture dropped into fixtures/ fails test_every_capture_is_listed
# until it is added here (or to OTHER_STAGES with the reason).
EXPECTED = {
    "public/amd-smi/mi300x-vf-guest-default-table-26.0.txt": "amd-smi",
    "public/amd-smi/mi325x-vf-partition-g0-spx-nps1.txt": "amd-smi-partition",
    "public/amd-smi/version-25.3.0-rocm-6.4.0-inbox-kernel-driver.txt": "amd-smi-version",
    "public/ascend-version-info/driver-24.1.rc2.2-mindie.txt": "ascend-version-info",
    "public/hccn_tool/910b1-huaweicloud-dev3-ip-g.txt": "hccn-tool",
    "public/hccn_tool/910b1-huaweicloud-dev3-lldp-g-elided.txt": "hccn-tool",
    "public/hccn_tool/mindcluster-doc-dev0-net_health-init-and-link-up.txt": "hccn-tool",
    "public/ibstat/h100-node-cx7-ib400-plus-cx6dx-eth-some-down-gpud.txt": "ibstat",
    "public/ibv_devinfo/azure-ndv5-h200-8x-ib-vf-plus-an0.txt": "ibv-devinfo",
    "public/lscpu/kunpeng920-4socket-8numa-a3-vllm-ascend-3002.txt": "lscpu",
    "public/lscpu/xeon8480-kvm-vm-208vcpu-h100-dstack.txt": "lscpu",
    "public/npu-smi-topo/a3-2chip-sio-sglang-30453.txt": "npu-smi-topo",
    "public/npu-smi/910b3-8npu-idle-24.1rc1-ms-swift.txt": "npu-smi-info",
    "public/npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt": "npu-smi-info",
    "public/numactl/2node-48cpu-unbalanced-free-zh-notes.txt": "numactl",
    "public/numactl/epyc-2s-256cpu-oci-mi355x-cpu239-missing.txt": "numactl",
    "public/nvidia-smi-q/h200-1gpu-q-550-header-excerpt.txt": "nvidia-smi-q",
    "public/nvidia-smi-q/h800-q-i0-525-full-single-gpu.txt": "nvidia-smi-q",
    "public/nvidia-smi-query/a100-80gb-4gpu-query-csv-580.txt": "nvidia-smi-query",
    "public/nvidia-smi-query/h200-8gpu-query-csv-power-pstate-570.txt": "nvidia-smi-query",
    "public/nvidia-smi-query/l4-1gpu-query-csv-power-temp-epyc.txt": "nvidia-smi-query",
    "public/nvidia-smi-topo/a100-80gb-4gpu-nv12-roce-nic-rocep49s0.txt": "nvidia-smi-topo",
    "public/nvidia-smi-topo/h100-8gpu-vm-single-nic-sys-dstack.txt": "nvidia-smi-topo",
    "public/nvidia-smi-topo/h100pcie-2gpu-nv12-bridge-numa1-spaces.txt": "nvidia-smi-topo",
    "public/nvidia-smi-topo/h800-8gpu-nv8-4nic-clipped-narrow-terminal.txt": "nvidia-smi-topo",
    "public/nvidia-smi-topo/pcie-8gpu-node-sys-no-nvlink-no-nic-lmdeploy.txt": "nvidia-smi-topo",
    "public/nvidia-smi-topo/rtx4090-8gpu-allsys-go-gpuallocator-17.txt": "nvidia-smi-topo",
    "public/nvidia-smi/h100pcie-2gpu-nvlink-bridge-table-555.txt": "nvidia-smi",
    "public/nvidia-smi/h200-8gpu-azure-ndv5-table-565.txt": "nvidia-smi",
    "public/nvlink/a100-80gb-4gpu-nvlink-s-all-12x25.txt": "nvidia-smi-nvlink",
    "public/nvlink/h800-8gpu-nvlink-status-8links-elided.txt": "nvidia-smi-nvlink",
    "public/rocm-smi/mi210-2gpu-concise-trailing-spaces-rocm-5480.txt": "rocm-smi",
    "public/rocm-smi/mi300x-8gpu-showtopo-trailing-spaces-dstack.txt": "rocm-smi-topo",
    "real/h100/lscpu-json.txt": "lscpu-json",
    "real/h100/lscpu.txt": "lscpu",
    "real/h100/nodes.txt": "pci-devices",
    "real/h100/numactl.txt": "numactl",
    "real/h100/nvlink-s.txt": "nvidia-smi-nvlink",
    "real/h100/nvlink-status.txt": "nvidia-smi-nvlink",
    "real/h100/osrel.txt": "os-release",
    "real/h100/procdrv.txt": "nvidia-proc-version",
    "real/h100/query.txt": "nvidia-smi-query",
    "real/h100/smi-q.txt": "nvidia-smi-q",
    "real/h100/smi-qx.txt": "nvidia-smi-q-xml",
    "real/h100/smi.txt": "nvidia-smi",
    "real/h100/topo.txt": "nvidia-smi-topo",
    "real/h100/torch.txt": "torch-info",
    "real/h200x2/bw.txt": "torch-bw",
    "real/h200x2/lscpu.txt": "lscpu",
    "real/h200x2/nodes.txt": "pci-devices",
    "real/h200x2/numactl.txt": "numactl",
    "real/h200x2/nvlink-c.txt": "nvidia-smi-nvlink-caps",
    "real/h200x2/nvlink-s.txt": "nvidia-smi-nvlink",
    "real/h200x2/p2p.txt": "torch-p2p",
    "real/h200x2/query.txt": "nvidia-smi-query",
    "real/h200x2/smi-q.txt": "nvidia-smi-q",
    "real/h200x2/smi-qx.txt": "nvidia-smi-q-xml",
    "real/h200x2/smi.txt": "nvidia-smi",
    "real/h200x2/topo-p2p.txt": "nvidia-smi-topo-p2p",
    "real/h200x2/topo.txt": "nvidia-smi-topo",
}

# Captures that belong to other stages' parsers (serve / bench, issue 6).
OTHER_STAGES = {
    "public/vllm-bench/ernie45-21b-a3b-8k1k-rps10-16prompts.txt": "vllm bench serve output (bench stage)",
    "public/vllm-serve-log/vllm-0.11-nv25.11-gb10-mistral7b-gptq-startup.txt": "vllm serve log (serve stage)",
}

# Outputs whose body alone is ambiguous or empty: detected from the `# command:` header only.
HEADER_ONLY = {"real/h100/nvlink-s.txt", "real/h100/nvlink-status.txt", "real/h100/procdrv.txt",
               "real/h100/osrel.txt", "real/h100/nodes.txt"}


def _captures():
    if not FIXTURES.exists():
        return []
    return sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.txt"))


def test_fixtures_present():
    assert FIXTURES.exists(), f"shared fixtures missing at {FIXTURES}"
    assert len(_captures()) >= 60


def test_every_capture_is_listed():
    unlisted = [c for c in _captures() if c not in EXPECTED and c not in OTHER_STAGES]
    assert not unlisted, f"classify these captures in EXPECTED or OTHER_STAGES: {unlisted}"


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_capture_detected_and_parsed(rel):
    text = fixture_text(rel)
    meta, body = split_capture(text)
    assert "command" in meta and not body.startswith("# source:")
    assert detect_kind(text) == EXPECTED[rel]
    result = parse(text)
    assert result["kind"] in (EXPECTED[rel], EXPECTED[rel].replace("-json", ""))
    assert EXPECTED[rel] in KINDS


@pytest.mark.parametrize("rel", sorted(set(EXPECTED) - HEADER_ONLY))
def test_capture_detected_from_body_alone(rel):
    _meta, body = split_capture(fixture_text(rel))
    assert detect_kind(body) == EXPECTED[rel]


@pytest.mark.parametrize("rel", sorted(OTHER_STAGES))
def test_other_stage_captures_are_refused_clearly(rel):
    with pytest.raises(ParseError, match="cannot tell which tool"):
        detect_kind(fixture_text(rel))


def test_unknown_kind_is_refused():
    with pytest.raises(ParseError, match="unknown kind"):
        parse("x", kind="no-such-tool")
