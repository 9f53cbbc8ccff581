"""`numactl` and `lscpu` of a simulated node: the profile's CPUs, NUMA nodes and memory.

Only the forms that describe the machine are simulated: ``numactl -H/--hardware``, ``numactl
-s/--show`` and ``lscpu`` (no options, ``-J/--json``, ``-e/--extended``). The installed wrappers
hand any other command line to the real ``/usr/bin/numactl`` / ``/usr/bin/lscpu`` unchanged (exec,
same argv), so ``numactl --cpunodebind=0 CMD`` still runs CMD.

Layouts: numactl 2.0.16 (Debian bookworm) and util-linux 2.38 lscpu writing to a pipe (flat
``Field: value`` lines, the first column as wide as the longest field plus one space), checked
against fixtures/real/{h100,h200x2} and the public captures in fixtures/public/{numactl,lscpu}.
"""

from __future__ import annotations

import os
import sys

REAL_TOOLS = {"numactl": "usr/bin/numactl", "lscpu": "usr/bin/lscpu"}
NUMACTL_SIMULATED = {"-H": "hardware", "--hardware": "hardware", "-s": "show", "--show": "show"}
LSCPU_SIMULATED = {
    (): "summary",
    ("-J",): "json",
    ("--json",): "json",
    ("-e",): "extended",
    ("--extended",): "extended",
}
SIMULATED_HELP = {
    "numactl": "-H/--hardware, -s/--show",
    "lscpu": "no options, -J/--json, -e/--extended",
}


def simulated(tool: str, argv: list[str]) -> bool:
    """Whether the simulator answers this command line itself (else the real tool runs)."""
    if tool == "numactl":
        return bool(argv) and argv[0] in NUMACTL_SIMULATED  # numactl acts on -H/-s at once, ignoring the rest
    if tool == "lscpu":
        return tuple(argv) in LSCPU_SIMULATED
    return False


def entry(tool: str, root: str) -> int:
    """What the installed /usr/local/bin/{numactl,lscpu} wrappers call.

    Kept light on purpose: no faults apply to these tools, so the simulated forms read only the
    profile (not main.py and its fault checks, whose imports cost more than the rendering).
    """
    argv = sys.argv[1:]
    if not simulated(tool, argv):
        real = os.path.join(root, REAL_TOOLS[tool])
        try:
            os.execv(real, [sys.argv[0], *argv])
        except OSError as exc:
            sys.stderr.write(
                f"{tool}: cannot run the real tool {real} ({exc.strerror}); "
                f"accelsim simulates only {SIMULATED_HELP[tool]}\n"
            )
            return 127
    os.environ.setdefault("ACCELSIM_ROOT", root)
    from . import profiles, state

    try:
        text = answer(tool, argv, profiles.load(state.read_profile_name()))
    except (state.StateError, profiles.ProfileError) as exc:
        sys.stderr.write(f"accelsim: {exc}\n")
        return 2
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `numactl -H | head -1`: stop quietly, as the real tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def answer(tool: str, argv: list[str], profile: dict) -> str:
    """The output of a simulated form (simulated(tool, argv) must hold)."""
    topo = topology(profile)
    if tool == "numactl":
        mode = NUMACTL_SIMULATED[argv[0]]
        return render_numactl_hardware(topo) if mode == "hardware" else render_numactl_show(topo)
    mode = LSCPU_SIMULATED[tuple(argv)]
    return {"summary": render_lscpu, "json": render_lscpu_json, "extended": render_lscpu_extended}[mode](topo)


def _main(tool: str, node, argv: list[str], result) -> None:
    """In-process form for main.run (tests, `accelsim` itself): refuses what the wrapper would pass on."""
    from .main import UsageError

    if not simulated(tool, argv):
        raise UsageError(
            f"simulated are {SIMULATED_HELP[tool]}; the installed wrapper runs /usr/bin/{tool} "
            f"for anything else (got: {' '.join(argv)})"
        )
    result.write(answer(tool, argv, node.profile))


def numactl_main(node, argv: list[str], result) -> None:
    _main("numactl", node, argv, result)


def lscpu_main(node, argv: list[str], result) -> None:
    _main("lscpu", node, argv, result)


# ---------------------------------------------------------------------------------------------
# topology


class Cpu:
    """One logical CPU and where it sits (logical ids, as lscpu -e prints them)."""

    __slots__ = ("cpu", "node", "socket", "core")

    def __init__(self, cpu: int, node: int, socket: int, core: int):
        self.cpu, self.node, self.socket, self.core = cpu, node, socket, core


class Topology:
    """The profile's CPUs (plain classes: the pass-through path must not pay for importing dataclasses)."""

    def __init__(
        self,
        spec: dict,
        nodes: list[list[int]],
        cpus: list[Cpu],
        sockets: int,
        threads_per_core: int,
        cores_per_socket: int,
        memory_mb: list[int],
    ):
        self.spec = spec  # the CPU model (_cpus.json)
        self.nodes = nodes  # CPUs of each NUMA node, ascending
        self.cpus = cpus  # ascending by cpu number
        self.sockets = sockets
        self.threads_per_core = threads_per_core
        self.cores_per_socket = cores_per_socket
        self.memory_mb = memory_mb

    def node_socket(self, node: int) -> int:
        return next(c.socket for c in self.cpus if c.node == node)


def parse_cpulist(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def cpulist(cpus: list[int]) -> str:
    """util-linux cpulist_create(): ranges for runs of 3 or more, a run of two as 'a,b'."""
    parts: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        if j == i:
            parts.append(str(cpus[i]))
        elif j == i + 1:
            parts.append(f"{cpus[i]},{cpus[j]}")
        else:
            parts.append(f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def topology(profile: dict) -> Topology:
    from .profiles import ProfileError

    spec = profile["cpu_spec"]
    nodes = [parse_cpulist(n) for n in profile["numa_nodes"]]
    node_of = {c: n for n, cpus in enumerate(nodes) for c in cpus}
    all_cpus = sorted(node_of)
    sockets = profile["cpu"]["sockets"]
    threads = profile["cpu"]["threads_per_core"]
    cores, rest = divmod(len(all_cpus), sockets * threads)
    if rest or all_cpus != list(range(len(all_cpus))) or sum(map(len, nodes)) != len(all_cpus):
        raise ProfileError(
            f"{profile['name']}: numa_nodes must cover CPUs 0-N once each, N+1 a multiple of "
            f"sockets x threads_per_core ({sockets} x {threads})"
        )
    total_cores = cores * sockets
    result = []
    for c in all_cpus:
        core = c % total_cores if spec["smt_numbering"] == "split" else c // threads
        result.append(Cpu(c, node_of[c], core // cores, core))
    return Topology(spec, nodes, result, sockets, threads, cores, list(profile["numa_memory_mb"]))


def cache_id(topo: Topology, cpu: Cpu, share: int | str) -> int:
    if share == "socket":
        return cpu.socket
    if share == "node":
        return cpu.node
    return cpu.core // int(share)


def human_size(size: int) -> str:
    """util-linux size_to_human_string(SIZE_SUFFIX_3LETTER | SIZE_SUFFIX_SPACE)."""
    exp = 0
    while exp < 60 and size >= 1 << (exp + 10):
        exp += 10
    letter = "BKMGTPE"[exp // 10]
    suffix = f" {letter}iB" if letter != "B" else " B"
    whole, frac = (size >> exp, size % (1 << exp)) if exp else (size, 0)
    if frac:
        frac = (frac * 1000) // (1 << exp)
        frac = ((frac + 50) // 100) * 10
        if frac == 100:
            whole, frac = whole + 1, 0
    if not frac:
        return f"{whole}{suffix}"
    digits = f"{frac:02d}"
    return f"{whole}.{digits[:-1] if digits.endswith('0') else digits}{suffix}"


def cache_summary(topo: Topology, name: str) -> str:
    size, share = topo.spec["caches"][name]
    instances = len({cache_id(topo, c, share) for c in topo.cpus})
    return f"{human_size(size * instances)} ({instances} instance{'s' if instances != 1 else ''})"


def summary_rows(topo: Topology) -> list[tuple[str, str]]:
    computed = {
        "CPU(s):": str(len(topo.cpus)),
        "On-line CPU(s) list:": cpulist([c.cpu for c in topo.cpus]),
        "Thread(s) per core:": str(topo.threads_per_core),
        "Core(s) per socket:": str(topo.cores_per_socket),
        "Socket(s):": str(topo.sockets),
    }
    rows: list[tuple[str, str]] = []
    for field, value in topo.spec["fields"]:
        if value is not None:
            rows.append((field, value))
        elif field == "NUMA node(s):":
            rows.append((field, str(len(topo.nodes))))
            rows.extend((f"NUMA node{n} CPU(s):", cpulist(cpus)) for n, cpus in enumerate(topo.nodes))
        elif field.endswith(" cache:"):
            rows.append((field, cache_summary(topo, field.split()[0])))
        else:
            rows.append((field, computed[field]))
    return rows


# ---------------------------------------------------------------------------------------------
# lscpu


def json_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def render_lscpu(topo: Topology) -> str:
    rows = summary_rows(topo)
    width = max(len(field) for field, _ in rows)
    return "".join(f"{field:<{width}} {value}\n" for field, value in rows)


def render_lscpu_json(topo: Topology) -> str:
    items = [
        f'         "field": {json_string(field)},\n         "data": {json_string(value)}\n'
        for field, value in summary_rows(topo)
    ]
    return '{\n   "lscpu": [\n      {\n' + "      },{\n".join(items) + "      }\n   ]\n}\n"


def render_lscpu_extended(topo: Topology) -> str:
    """`lscpu -e`: CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE [MAXMHZ MINMHZ MHZ] (logical ids)."""
    fields = dict(topo.spec["fields"])
    caches = sorted(topo.spec["caches"])
    header = ["CPU", "NODE", "SOCKET", "CORE", ":".join(caches), "ONLINE"]
    freq = "CPU max MHz:" in fields
    if freq:
        header += ["MAXMHZ", "MINMHZ", "MHZ"]
        scaling = fields.get("CPU(s) scaling MHz:", "100%").rstrip("%")
        mhz = f"{float(fields['CPU max MHz:']) * float(scaling) / 100:.4f}"
    rows = []
    for c in topo.cpus:
        ids = ":".join(str(cache_id(topo, c, topo.spec["caches"][name][1])) for name in caches)
        row = [str(c.cpu), str(c.node), str(c.socket), str(c.core), ids, "yes"]
        if freq:
            row += [fields["CPU max MHz:"], fields["CPU min MHz:"], mhz]
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    left = header.index(":".join(caches))

    def line(cells: list[str]) -> str:
        return (
            " ".join(
                cell.ljust(w) if i == left else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
            + "\n"
        )

    return "".join(line(r) for r in [header, *rows])


# ---------------------------------------------------------------------------------------------
# numactl


def distance(topo: Topology, a: int, b: int) -> int:
    d = topo.spec["distances"]
    if a == b:
        return d["local"]
    sa, sb = topo.node_socket(a), topo.node_socket(b)
    if sa == sb:
        return d["same_socket"]
    die_a = [n for n in range(len(topo.nodes)) if topo.node_socket(n) == sa].index(a)
    die_b = [n for n in range(len(topo.nodes)) if topo.node_socket(n) == sb].index(b)
    return d["remote"] + d["die_step"] * (die_a + die_b)


def free_mb(size: int, node: int) -> int:
    """An idle node: node 0 carries the kernel and page cache, the others are almost empty."""
    return size * (95 if node == 0 else 98) // 100


def render_numactl_hardware(topo: Topology) -> str:
    count = len(topo.nodes)
    ids = "0" if count == 1 else f"0-{count - 1}"
    out = [f"available: {count} nodes ({ids})\n"]
    for n, cpus in enumerate(topo.nodes):
        out.append(f"node {n} cpus:" + "".join(f" {c}" for c in cpus) + "\n")
        out.append(f"node {n} size: {topo.memory_mb[n]} MB\n")
        out.append(f"node {n} free: {free_mb(topo.memory_mb[n], n)} MB\n")
    out.append("node distances:\n")
    # printf("% 3d ") of numactl: a sign column (a space), then width 3 -> "  0 ", " 10 ", " 100 "
    out.append("node " + "".join(f"{n: 3d} " for n in range(count)) + "\n")
    for a in range(count):
        out.append(f"{a: 3d}: " + "".join(f"{distance(topo, a, b): 3d} " for b in range(count)) + "\n")
    return "".join(out)


def render_numactl_show(topo: Topology) -> str:
    """An unbound process: default policy, every CPU and node allowed."""
    nodes = "".join(f"{n} " for n in range(len(topo.nodes)))
    return (
        "policy: default\n"
        "preferred node: current\n"
        "physcpubind: " + "".join(f"{c.cpu} " for c in topo.cpus) + "\n"
        f"cpubind: {nodes}\n"
        f"nodebind: {nodes}\n"
        f"membind: {nodes}\n"
        "preferred: \n"
    )
