#!/usr/bin/env python3
"""How the stages' cost grows with the node count, each against its own limit measured in the same run.

    .venv/bin/python tests/perf/bench_scale.py --nodes 2,8,16,32 [--repeat 3] [--name scale]   # make perf
    .venv/bin/python tests/perf/bench_scale.py --inventory <sim-cluster inventory> [--inventory ...] --no-write

For each N, a simulated cluster of N nodes (scripts/sim-cluster, named <--name>-<N>, removed after),
then, interleaved --repeat times (--repeat-largest for the largest N), the median kept:
  verify    playbooks/verify.yml with -e verify_fabric=never (the probes and their judgement; the
            cross-node fabric tests have no counterpart in the loop) against a parallel SSH loop
            running the same probe commands (tests/perf/bench_verify.py's two sides: one multiplexed
            ssh per probe, every host at once);
  ssh_mesh  the stage's default check, playbooks/ssh_mesh.yml --tags ssh_mesh_check with the role's
            default pairs (ssh_mesh_check_pairs, read from roles/ssh_mesh/defaults/main.yml: mpirun,
            the pairs mpirun needs, llmb.sshmesh.mesh_pairs) and its mpirun left out
            (-e ssh_mesh_check_mpirun=false), against a parallel SSH loop of the same pair commands:
            from the controller to every node at once, each node running the check's own ssh argv
            (llmb.sshmesh.ssh_argv) to its targets, as many at once as the check
            (ssh_mesh_check_parallel, 8), in the same rotated order;
  ssh_mesh + mpirun  the default check as the stage runs it (--tags ssh_mesh_check: the pairs, then
            mpirun across all nodes), no limit of its own: the figure to compare between N (the
            check at 32 nodes within 2x of 16).
The stage is applied once before (keys, config), untimed. At the largest N, one pair the check needs
is then blocked (an iptables DROP on the launcher's last target against the launcher's address) and
the default check must fail naming that pair (llmb.sshmesh.failures' words); the message is printed.
Writes docs/scale.md (the table, the machine, the date and the load) and docs/scale.png (seconds vs
nodes per stage, solid, and its limit, dashed); --no-write prints the table only. The plot needs
matplotlib (the `perf` extra); without it the table is still written and the plot is skipped with a
message. No time is asserted: on a small machine the controller's cores are part of what is measured
(every simulated node runs on them too).

Not measured: site.yml's changed=0 re-run (it needs a full first run of site.yml per N, with the
engine double and the test hub; tests/perf/bench_demo.py times it at 2 nodes; docs/scale.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "perf"))
from bench_verify import NO_FABRIC, probe_commands, run_ssh, run_verify, ssh_args, timed_on_every_host  # noqa: E402
from llmb.sshmesh import failures, mesh_pairs, rotate, ssh_argv  # noqa: E402
from perf_common import ansible_env, cluster, inventory_hosts  # noqa: E402

PROFILE = "h800-hgx8"
MESH_DIR = "/etc/llmb/ssh-mesh"  # llmb_ssh_mesh_dir's default (the deployment document's dirs.ssh_mesh)
MESH_PARALLEL = 8  # ssh_mesh_check_parallel's default
# the check's default pairs, as the role states them (the loop checks the same pairs)
MESH_MODE = yaml.safe_load((ROOT / "roles" / "ssh_mesh" / "defaults" / "main.yml").read_text())["ssh_mesh_check_pairs"]


def mesh_run(inv: Path, key_dir: Path, *extra: str) -> tuple[float, subprocess.CompletedProcess]:
    argv = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), "playbooks/ssh_mesh.yml",
            "-e", f"ssh_mesh_key_dir={key_dir}", "-e", f"llmb_ssh_mesh_dir={MESH_DIR}", *extra]
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=ansible_env(), cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - t0, p


def mesh_playbook(inv: Path, key_dir: Path, *extra: str) -> float:
    dt, p = mesh_run(inv, key_dir, *extra)
    if p.returncode != 0:
        raise SystemExit(f"ssh_mesh.yml {' '.join(extra)} failed (rc {p.returncode}):\n"
                         f"{p.stdout[-3000:]}\n{p.stderr[-1500:]}")
    return dt


def blocked_pair(inv: Path, key_dir: Path, hosts: list[dict]) -> tuple[str, float]:
    """Block one pair the default check needs (the launcher to the node it checks last: an iptables DROP
    on that node against the launcher's address, port 22), run the default check, and return the line of
    its failure that names the pair, and its seconds. The rule is removed whatever happens."""
    order = [h["name"] for h in hosts]
    by_name = {h["name"]: h for h in hosts}
    launcher = order[0]
    pair = rotate([{"name": p["target"], **p} for p in mesh_pairs(order, MESH_MODE)[launcher]], launcher, order)[-1]
    src, dst = by_name[launcher], by_name[pair["target"]]
    # how the check names the pair (llmb.sshmesh.failures), up to what ssh said
    named = failures(launcher, [{"ok": False, "target": dst["name"], "address": dst["node_ip"], "port": 22,
                                 "role": pair["role"], "error": "", "attempts": 1, "hint": ""}])[0]
    named = named.split(": SSH with BatchMode failed")[0]
    cp = Path(tempfile.mkdtemp(prefix="llmb-blk-"))
    rule = ["INPUT", "-s", src["node_ip"], "-p", "tcp", "--dport", "22", "-j", "DROP"]
    subprocess.run([*ssh_args(dst, cp), shlex.join(["iptables", "-I", *rule])], check=True)
    try:
        dt, p = mesh_run(inv, key_dir, "--tags", "ssh_mesh_check")
    finally:
        subprocess.run([*ssh_args(dst, cp), shlex.join(["iptables", "-D", *rule])], check=True)
        subprocess.run([*ssh_args(dst, cp)[:-1], "-O", "exit", f"root@{dst['ip']}"], capture_output=True, check=False)
    if p.returncode == 0:
        raise SystemExit(f"the default mesh check passed with {named} blocked:\n{p.stdout[-3000:]}")
    lines = [ln[ln.index(named):].strip() for ln in p.stdout.splitlines() if named in ln]
    if not lines:
        raise SystemExit(f"the default mesh check failed without naming {named}:\n{p.stdout[-3000:]}")
    return lines[0], dt


def mesh_ssh_loop(hosts: list[dict], mode: str = MESH_MODE) -> float:
    """Every node at once, each to its targets (the check's pairs) 8 at a time, the check's own ssh argv;
    every pair must answer. A node without targets is not contacted."""
    cp = Path(tempfile.mkdtemp(prefix="llmb-scp-"))
    order = [h["name"] for h in hosts]
    pairs = mesh_pairs(order, mode)
    by_name = {h["name"]: h for h in hosts}
    npairs = sum(len(v) for v in pairs.values())

    def script(me: dict) -> str:
        # the check's width (ssh_mesh_check_parallel, under sshd's MaxStartups) and its rotated order
        targets = rotate([{"name": p["target"]} for p in pairs[me["name"]]], me["name"], order)
        peers = [by_name[t["name"]]["node_ip"] for t in targets]
        ssh = shlex.join(ssh_argv("@", 22, "root", f"{MESH_DIR}/ssh_config", 10, "hostname"))
        return f"printf '%s\\n' {shlex.join(peers)} | xargs -P {MESH_PARALLEL} -I@ {ssh}"

    def one(h: dict) -> int:
        if not pairs[h["name"]]:
            return 0
        r = subprocess.run([*ssh_args(h, cp), script(h)], capture_output=True, text=True, check=False)
        return len(r.stdout.split())

    answers, dt = timed_on_every_host(hosts, cp, one)
    if sum(answers) != npairs:
        raise SystemExit(f"the mesh SSH loop got {sum(answers)} answers of {npairs} pairs")
    return dt


def measure(inv: Path, repeat: int, block: bool) -> tuple[dict[str, tuple[float, float | None]], str | None]:
    """({stage: (toolkit seconds, limit seconds)}, medians over `repeat` interleaved runs; with `block`, the
    blocked-pair line of the default check and its seconds)."""
    hosts = inventory_hosts(inv)
    cmds = probe_commands("nvidia")
    runs: dict[str, list[float]] = {}
    blocked = None
    with tempfile.TemporaryDirectory() as tmp:
        key_dir = Path(tmp) / "mesh-key"
        mesh_playbook(inv, key_dir, "-e", "ssh_mesh_check=false")  # apply once, untimed
        for i in range(repeat):
            runs.setdefault("verify limit", []).append(run_ssh(hosts, cmds, one_script=False))
            runs.setdefault("verify", []).append(
                run_verify(inv, PROFILE, False, Path(tmp) / f"v{i}", *NO_FABRIC))
            runs.setdefault("ssh_mesh limit", []).append(mesh_ssh_loop(hosts))
            runs.setdefault("ssh_mesh", []).append(
                mesh_playbook(inv, key_dir, "--tags", "ssh_mesh_check", "-e", "ssh_mesh_check_mpirun=false"))
            runs.setdefault("ssh_mesh + mpirun", []).append(mesh_playbook(inv, key_dir, "--tags", "ssh_mesh_check"))
        if block:
            line, dt = blocked_pair(inv, key_dir, hosts)
            blocked = f"{line} (the default check failed in {dt:.1f} s)"
    med = {k: statistics.median(v) for k, v in runs.items()}
    out: dict[str, tuple[float, float | None]] = {s: (med[s], med[f"{s} limit"]) for s in ("verify", "ssh_mesh")}
    out["ssh_mesh + mpirun"] = (med["ssh_mesh + mpirun"], None)
    return out, blocked


def table(results: dict[int, dict[str, tuple[float, float | None]]]) -> str:
    rows = ["| nodes | stage | toolkit s | limit s (parallel SSH loop) | ratio |", "|---:|---|---:|---:|---:|"]
    for n in sorted(results):
        for stage, (ours, limit) in results[n].items():
            if limit is None:
                rows.append(f"| {n} | {stage} | {ours:.2f} | - | - |")
            else:
                rows.append(f"| {n} | {stage} | {ours:.2f} | {limit:.2f} | {ours / limit:.2f} |")
    ns = sorted(results)
    rows.append("")
    for a, b in zip(ns, ns[1:], strict=False):
        growth = ", ".join(f"{s} {results[b][s][0] / results[a][s][0]:.2f}x" for s in results[b] if s in results[a])
        rows.append(f"- {a} -> {b} nodes: {growth}")
    return "\n".join(rows)


def targets(results: dict[int, dict[str, tuple[float, float | None]]]) -> list[str]:
    """Issue 14's two figures, where the run has the node counts they are about."""
    out = []
    for n in (16, 32):
        if n in results:
            ours, limit = results[n]["verify"]
            out.append(f"verify / its SSH loop at {n} nodes: {ours / limit:.2f} (target <= 2)")
    if 16 in results and 32 in results:
        for s in ("ssh_mesh", "ssh_mesh + mpirun"):
            out.append(f"{s} (default check) 32 / 16 nodes: {results[32][s][0] / results[16][s][0]:.2f} (target <= 2)")
    return out


def machine() -> str:
    load = os.getloadavg()
    return (f"{platform.node()}: {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")


def other_containers(mine: str) -> int:
    """Running containers that are not this run's clusters (other users of the machine's cores)."""
    p = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True, check=False)
    return sum(1 for n in p.stdout.split() if not n.startswith(f"{mine}-"))


def plot(results: dict[int, dict[str, tuple[float, float | None]]], png: Path) -> str:
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed (the `perf` extra): no plot written"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted(results)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for i, stage in enumerate(results[ns[0]]):
        color = f"C{i}"
        ax.plot(ns, [results[n][stage][0] for n in ns], "o-", color=color, label=stage)
        if all(results[n][stage][1] is not None for n in ns):
            ax.plot(ns, [results[n][stage][1] for n in ns], "s--", color=color, label=f"{stage} limit (SSH loop)")
    ax.set_xlabel("simulated nodes")
    ax.set_ylabel("seconds")
    ax.set_xticks(ns)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("seconds vs nodes per stage (dashed: its SSH-loop limit, same run)", fontsize=10)
    fig.tight_layout()
    tmp = png.with_suffix(".png.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, png)
    return f"plot written to {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}"


def write_doc(md: Path, text: str) -> None:
    """Replace the generated section of docs/scale.md (between the markers), keeping the prose."""
    begin, end = "<!-- bench_scale: begin -->", "<!-- bench_scale: end -->"
    old = md.read_text() if md.exists() else f"# Scale\n\n{begin}\n{end}\n"
    if begin not in old or end not in old:
        old = f"{old.rstrip()}\n\n{begin}\n{end}\n"
    head, rest = old.split(begin, 1)
    new = f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}"
    tmp = md.with_suffix(".md.tmp")
    tmp.write_text(new)
    os.replace(tmp, md)


def parse_nodes(s: str) -> list[int]:
    try:
        ns = sorted({int(x) for x in s.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--nodes: expected a comma-separated list of node counts, found {s!r}") from None
    if not ns or ns[0] < 2:
        raise SystemExit(f"--nodes: every node count must be 2 or more (the mesh needs a pair), found {s!r}")
    return ns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="2,8,16,32", help="comma-separated node counts (default 2,8,16,32)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per side; the median is kept")
    ap.add_argument("--repeat-largest", type=int, help="runs per side at the largest N (default --repeat)")
    ap.add_argument("--name", default=os.environ.get("BENCH_SCALE_NAME", "scale"),
                    help="prefix of the simulated clusters' names, <name>-<N> (default $BENCH_SCALE_NAME or scale)")
    ap.add_argument("--no-block", action="store_true", help="skip the blocked-pair run at the largest N")
    ap.add_argument("--inventory", type=Path, action="append",
                    help="measure this running cluster (its size is N) instead of bringing clusters up; repeatable")
    ap.add_argument("--no-write", action="store_true", help="print the table; leave docs/ alone")
    ap.add_argument("--md", type=Path, default=ROOT / "docs" / "scale.md")
    ap.add_argument("--png", type=Path, default=ROOT / "docs" / "scale.png")
    a = ap.parse_args()
    results: dict[int, dict[str, tuple[float, float | None]]] = {}
    loads: dict[int, tuple[int, float, float, int]] = {}
    blocked: str | None = None
    t_all = time.perf_counter()
    given = {len(inventory_hosts(inv)): inv for inv in a.inventory or []}
    sizes = sorted(given) if given else parse_nodes(a.nodes)
    for n in sizes:
        largest = n == sizes[-1]
        repeat = a.repeat_largest if largest and a.repeat_largest else a.repeat
        ctx = contextlib.nullcontext(given[n]) if given else cluster(f"{a.name}-{n}", n, PROFILE)
        with ctx as inv:
            load0 = os.getloadavg()[0]
            results[n], line = measure(inv, repeat, block=largest and not a.no_block)
            loads[n] = (repeat, load0, os.getloadavg()[0], other_containers(a.name))
        blocked = line or blocked
        print(f"{n} nodes: " + ", ".join(f"{s} {o:.2f} s" + (f" (limit {lim:.2f} s, ratio {o / lim:.2f})" if lim else "")
                                         for s, (o, lim) in results[n].items()), flush=True)
    repeats = f"--repeat {a.repeat}" + (f" --repeat-largest {a.repeat_largest}" if a.repeat_largest else "")
    load_rows = ["| nodes | runs per side | load average (1 min) before / after | other containers running |",
                 "|---:|---:|---|---:|"]
    load_rows += [f"| {n} | {r} | {l0:.1f} / {l1:.1f} | {k} |" for n, (r, l0, l1, k) in loads.items()]
    text = "\n".join([
        f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by "
        f"`tests/perf/bench_scale.py --nodes {','.join(map(str, sizes))} {repeats}` "
        f"in {time.perf_counter() - t_all:.0f} s on {machine()}.",
        "",
        table(results),
        "",
        *[f"- {t}" for t in targets(results)],
        *([f"- blocked pair at {sizes[-1]} nodes, the default check's failure: `{blocked}`"] if blocked else []),
        "",
        *load_rows,
    ])
    print("\n" + text)
    if not a.no_write:
        write_doc(a.md, text + "\n\n![seconds vs nodes per stage](scale.png)")
        print(plot(results, a.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
