"""`nvidia-smi` argument handling (the subset a bring-up toolkit uses)."""

from __future__ import annotations

from . import nvidia, state
from .main import Node, Result, UsageError

INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
HELP = """\
NVIDIA System Management Interface -- v{version} (simulated by accelsim)

Simulated: nvidia-smi [-i ID] [-L | -q [-x] | --query-gpu=FIELDS --format=csv[,noheader][,nounits]]
           nvidia-smi topo -m | --matrix | -p2p {{r,w,n,a,p}}
           nvidia-smi nvlink -s | --status | -c | --capabilities [-i ID]
"""


def main(node: Node, argv: list[str], result: Result) -> None:
    model = nvidia.build(node.profile, node.faults, node.host, state.fabricmanager_alive())
    if argv[:1] in (["-h"], ["--help"]):
        result.write(HELP.format(version=model.driver))
        return
    if not model.gpus:
        result.fail(6, "No devices were found", to_stdout=True)
        return
    if argv[:1] == ["topo"]:
        _topo(model, argv[1:], result)
    elif argv[:1] == ["nvlink"]:
        _nvlink(model, argv[1:], result)
    else:
        _main(model, argv, result)


def _take_ids(args: list[str], model: nvidia.NvidiaNode) -> tuple[list[str], list[int] | None]:
    """Remove -i/--id from args; return the remaining args and the selected indices."""
    rest: list[str] = []
    ids: list[int] | None = None
    it = iter(args)
    for arg in it:
        value = None
        if arg in ("-i", "--id"):
            value = next(it, None)
            if value is None:
                raise UsageError(f"{arg} needs a value")
        elif arg.startswith("--id="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-i") and len(arg) > 2 and arg[2:].isdigit():
            value = arg[2:]
        if value is None:
            rest.append(arg)
            continue
        ids = []
        for item in value.split(","):
            ids.append(_resolve_id(item.strip(), model))
    return rest, ids


def _resolve_id(item: str, model: nvidia.NvidiaNode) -> int:
    for g in model.gpus:
        if item in (str(g.index), g.uuid, g.bus_id, g.bus_id[4:], g.serial):
            return g.index
    raise UsageError(f"No GPU found with ID {item!r}")  # real: "No devices were found"


def _main(model: nvidia.NvidiaNode, argv: list[str], result: Result) -> None:
    try:
        args, ids = _take_ids(argv, model)
    except UsageError as exc:
        if "No GPU" in str(exc):
            result.fail(6, "No devices were found", to_stdout=True)
            return
        raise
    query = fmt = None
    flags = set()
    for arg in args:
        if arg.startswith("--query-gpu="):
            query = arg.split("=", 1)[1]
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
        elif arg in ("-q", "--query"):
            flags.add("q")
        elif arg in ("-x", "--xml-format"):
            flags.add("x")
        elif arg in ("-L", "--list-gpus"):
            flags.add("L")
        else:
            result.fail(2, INVALID, to_stdout=True)
            return
    if query is not None:
        if fmt is None or flags:
            result.fail(2, INVALID, to_stdout=True)
            return
        opts = [o.strip() for o in fmt.split(",")]
        if opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
            result.fail(2, INVALID, to_stdout=True)
            return
        fields = [f.strip() for f in query.split(",") if f.strip()]
        try:
            text = nvidia.render_query(model, fields, "noheader" not in opts, "nounits" not in opts, ids)
        except nvidia.QueryError as exc:
            result.fail(2, f"{exc}\n\n", to_stdout=True)
            return
        result.write(text)
    elif flags == {"q"}:
        result.write(nvidia.render_q(model, ids))
    elif flags == {"q", "x"}:
        result.write(nvidia.render_qx(model, ids))
    elif flags == {"L"}:
        result.write(nvidia.render_list(model, ids))
    elif not flags and fmt is None:
        if ids is not None:
            model.gpus = nvidia.select(model, ids)
        result.write(nvidia.render_table(model))
    else:
        result.fail(2, INVALID, to_stdout=True)


def _topo(model: nvidia.NvidiaNode, args: list[str], result: Result) -> None:
    if args in (["-m"], ["--matrix"]):
        result.write(nvidia.render_topo_matrix(model))
    elif len(args) == 2 and args[0] in ("-p2p", "--p2pstatus") and args[1] in ("r", "w", "n", "a", "p"):
        result.write(nvidia.render_topo_p2p(model, args[1]))
    else:
        raise UsageError(
            f"topo {' '.join(args)}: simulated are 'topo -m', 'topo --matrix', 'topo -p2p r|w|n|a|p'"
        )


def _nvlink(model: nvidia.NvidiaNode, args: list[str], result: Result) -> None:
    rest, ids = _take_ids(args, model)
    if rest in (["-s"], ["--status"]):
        result.write(nvidia.render_nvlink_status(model, ids))
    elif rest in (["-e"], ["--errorcounters"]):
        result.write(nvidia.render_nvlink_errors(model, ids))
    elif rest in (["-c"], ["--capabilities"]):
        result.write(nvidia.render_nvlink_capabilities(model, ids))
    else:
        raise UsageError(
            f"nvlink {' '.join(args)}: simulated are 'nvlink -s|--status|-e|--errorcounters|-c|--capabilities [-i N]'"
        )
