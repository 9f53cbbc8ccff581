"""accelsim: a simulator of accelerator node tools (nvidia-smi, npu-smi, hccn_tool, amd-smi, rocm-smi,
and the host's numactl -H / lscpu).

Test code. Runs on simulated nodes (Debian bookworm, Python 3.11, standard library only): every
invocation reads the node's profile and faults from ``$ACCELSIM_ROOT/etc/accelsim`` and renders
output in the byte layout of the real tool, modelled on real captures. See docs/simulator.md.
"""

__all__ = ["run"]


def run(tool: str, argv: list[str]):
    """Run one simulated tool in-process; returns ``(rc, stdout, stderr)``."""
    from .main import run as _run

    return _run(tool, argv)
