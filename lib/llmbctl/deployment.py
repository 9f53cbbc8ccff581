"""The deployment, resolved once: inventory + catalog -> one JSON document every stage reads.

Stage 0 (playbooks/_run.yml) calls ``resolve`` on the controller, writes the document to
``<artifacts>/<run-id>/deployment.json`` and gives every host its view (``host_view``) as the fact
``llmb_deployment``; ``scripts/launch-plan --deployment`` prints the same document. Roles read
their part of it and decide nothing it already says.

The document (key order fixed, JSON-ready):

    schema        DOCUMENT_SCHEMA
    run           {id, artifacts_dir}              (left out of the hash)
    planned       true when the launch plan could be made
    problems      the planner's problems (dicts) when it could not; [] otherwise
    platform      {name, vendor}
    engine        {name, version, install, channel, venv | null, image {ref, digest, id} | null}
    model         {profile, repo_id, revision, commit, allow_patterns, dir, served_name}
    dirs          node directory layout (llmbctl.layout)
    ports         {api, ray, ray_dashboard, dp_rpc, sglang_dist, vllm_master, sshd}
    start_levels  the plan's start orders, ascending
    hosts         {name: {address, rank, config_patches, packages, plan[, control]}}, plan = the
                  launch-plan entry; packages = the pinned requirements its services run beside the
                  engine (the engine stage installs them with it: engine_host); control: true on a
                  host outside accel_nodes that runs the PD router only (engine stage: its packages
                  alone; serve, bench and accuracy run there; verify, weights, ssh_mesh do not)
    hash          sha256 of the canonical JSON of everything but run and hash

An inventory that cannot be planned (a verify-only inventory, say) still gives a document: the
sections the inventory states by itself (platform name, engine name, install, dirs, ports, hosts
with their addresses) are filled, the rest are null, ``planned`` is false and ``problems`` says
why. Stages that need the plan fail on that; verify, collect and report do not need it.

Pins: ``resolve`` fills ``model.commit`` and ``engine.image.digest`` from what the inventory
states without any network (a 40-hex revision, llmb_model_revision, engine_image_pins). Stage 0 calls
``build``: the engine release of an inventory that leaves llmb_engine_version unset is the one its
lock records (llmbctl.pins.resolve_engine; the newest shipped on the first bring-up), then ``pin``
(llmbctl.pins): a branch is resolved to its commit at the hub, a tag to its digest at the registry,
all three recorded in ``<inventory>/llmb.lock.json``; what cannot be resolved is listed in
``pins.problems`` and refuses every stage that needs the plan, before any host is contacted.
``pins.sources`` says where each pin came from (engine, model, image: inventory, lock, resolved
or default); it is left out of the hash (a second run reads from the lock what the first resolved).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from llmb.fsutil import write_text_if_changed

from . import layout
from .planner import PlanError, plan_inventory
from .planner.inventory import GROUP, KNOB_BY_NAME, node_address, read_var

DOCUMENT_SCHEMA = 1
PORT_KNOBS = (
    ("api", "llmb_api_port"),
    ("ray", "llmb_ray_port"),
    ("ray_dashboard", "llmb_ray_dashboard_port"),
    ("dp_rpc", "llmb_dp_rpc_port"),
    ("sglang_dist", "llmb_sglang_dist_port"),
    ("vllm_master", "llmb_vllm_master_port"),
    ("sshd", "llmb_sshd_port"),
)


class DeploymentError(Exception):
    """A value of the run (id, directory) cannot be used; the message names it."""


def _shared_vars(hostvars: Any, groups: dict[str, Any]) -> dict[str, Any]:
    """Variables of the first accelerator node (else of the only host): what the stages share."""
    names = [str(h) for h in (groups.get(GROUP) or [])] or [str(h) for h in (groups.get("all") or [])][:1]
    if not names:
        return {}
    hv = hostvars[names[0]] if names[0] in hostvars else None
    return hv if hv is not None else {}


def _get(hv: Any, key: str) -> Any:
    """The inventory's value (planner.inventory.read_var, the one reader); unreadable reads as unset
    here (the planner reports it)."""
    return read_var(hv, key)[0]


def _knob(hv: Any, key: str) -> Any:
    value = _get(hv, key)
    return KNOB_BY_NAME[key].default if value is None else value


def validate_run_id(run_id: str) -> str:
    """A run id names a directory: letters, digits, '.', '_', '-', '+', ':' only, not '.'/'..'."""
    rid = str(run_id or "")
    ok = rid not in ("", ".", "..") and len(rid) <= 128
    ok = ok and all(c.isalnum() or c in "._-+:" for c in rid)
    if not ok:
        raise DeploymentError(
            f"run id {rid!r} (LLMB_RUN_ID): expected 1-128 characters of letters, digits and . _ - + :, "
            "found a path separator, space or other character; set LLMB_RUN_ID to a plain name"
        )
    return rid


def _pins(shared: Any, model_revision: str | None, image_ref: str | None) -> dict[str, Any]:
    """PINS HOOK (llmbctl.pins replaces this): the model commit and the image digest/id from the inventory.

    model commit: llmb_model_revision, else the model profile's revision.
    image: engine_image_pins[<ref>] = {digest, id}.
    """
    commit = _get(shared, "llmb_model_revision") or model_revision
    pins = _get(shared, "engine_image_pins") or {}
    pin = pins.get(image_ref) if isinstance(pins, dict) and image_ref else None
    pin = pin if isinstance(pin, dict) else {}
    return {
        "commit": str(commit) if commit else None,
        "image_digest": str(pin["digest"]) if pin.get("digest") else None,
        "image_id": str(pin["id"]) if pin.get("id") else None,
    }


def _engine_channel(vendor: str | None) -> str:
    """Index channel of a host install: the recipes' ROCm index on AMD, the stable one elsewhere."""
    return "rocm" if vendor == "amd" else "stable"


def resolve(
    hostvars: Any,
    groups: dict[str, Any],
    run_id: str | None = None,
    artifacts_dir: str | None = None,
    data_dir: str | None = None,
    host_set: dict[str, list[str]] | None = None,
    inventory_files: list[str] | None = None,
    engine_version: str | None = None,
) -> dict[str, Any]:
    """The deployment document of an inventory (pure: no file is written, no host contacted).

    host_set: per host, the variable names set on the host itself (planner/inventory.py);
    inventory_files: the inventory's YAML files, checked for duplicate keys (planner/yamlkeys.py);
    engine_version: the locked release, used when the inventory leaves llmb_engine_version unset."""
    groups = {str(k): list(v or []) for k, v in dict(groups).items()}
    shared = _shared_vars(hostvars, groups)
    problems: list[dict[str, Any]] = []
    planned = None
    if groups.get(GROUP):
        try:
            planned = plan_inventory(hostvars, groups, data_dir, host_set=host_set,
                                     inventory_files=inventory_files, engine_version=engine_version)
        except PlanError as err:
            problems = [p.to_dict() for p in err.problems]
    else:
        problems = [
            {
                "check": "hosts",
                "message": f"the inventory has no hosts in group {GROUP}",
                "found": None,
                "expected": f"a group {GROUP} listing the accelerator nodes",
                "fix": f"add the nodes under 'children: {GROUP}: hosts:' in hosts.yml",
                "host": None,
            }
        ]

    v = planned.ctx.v if planned else shared
    install = _knob(v, "llmb_install")
    engine_name = _get(v, "llmb_engine")
    version = planned.ctx.version if planned else _get(v, "llmb_engine_version")
    version = str(version) if version is not None else None
    vendor = planned.ctx.platform.vendor if planned else None
    plans = planned.to_list() if planned else []

    image_ref = None
    if install == "container":
        images = [s.get("image") for p in plans for s in p.get("services") or [] if s.get("image")]
        image_ref = images[0] if images else _get(v, "llmb_container_image")
    profile = planned.ctx.model if planned else {}
    pins = _pins(shared, profile.get("revision"), image_ref)

    engine = {
        "name": engine_name,
        "version": version,
        "install": install,
        "channel": _engine_channel(vendor) if install == "host" else None,
        "venv": (
            layout.engine_venv(engine_name, version, _get(v, "llmb_engine_venv"))
            if install == "host" and engine_name and version
            else None
        ),
        "image": (
            {"ref": image_ref, "digest": pins["image_digest"], "id": pins["image_id"]} if image_ref else None
        ),
    }
    files = profile.get("files") or {}
    model = {
        "profile": _get(v, "llmb_model"),
        "repo_id": profile.get("repo_id"),
        "revision": profile.get("revision"),
        "commit": pins["commit"],
        "allow_patterns": files.get("allow_patterns") if isinstance(files, dict) else None,
        "dir": _get(v, "llmb_model_dir"),
        "served_name": planned.ctx.served_name if planned else None,
    }

    hosts: dict[str, Any] = {}
    if planned:
        for entry in plans:
            hosts[entry["host"]] = {
                "address": entry["address"],
                "rank": entry["rank"],
                "config_patches": (entry.get("model") or {}).get("config_patches") or [],
                "packages": list(dict.fromkeys(p for s in entry.get("services") or [] for p in s.get("packages") or [])),
                "plan": entry,
            }
            if entry.get("control"):  # a control node (the PD router's): no engine, no accelerators
                hosts[entry["host"]]["control"] = True
    else:
        for rank, name in enumerate(str(h) for h in groups.get(GROUP) or []):
            hv = hostvars[name] if name in hostvars else None
            hosts[name] = {
                "address": node_address(name, hv) if hv is not None else name,
                "rank": rank,
                "config_patches": [],
                "packages": [],
                "plan": None,
            }

    doc: dict[str, Any] = {
        "schema": DOCUMENT_SCHEMA,
        "run": {"id": run_id, "artifacts_dir": artifacts_dir},
        "planned": planned is not None,
        "problems": problems,
        "platform": {"name": _get(v, "llmb_platform"), "vendor": vendor},
        "engine": engine,
        "model": model,
        "dirs": layout.node_dirs(_get(v, "llmb_ssh_mesh_dir"), _get(v, "llmb_config_dir")),
        "ports": {key: _knob(v, knob) for key, knob in PORT_KNOBS},
        "start_levels": sorted({s["order"] for p in plans for s in p.get("services") or []}),
        "hosts": hosts,
        "pins": {"resolved": False, "lock": None, "problems": [], "sources": {
            "engine": _engine_source(shared, engine_version) if version else None,
            "model": ("inventory" if _get(shared, "llmb_model_revision") else "default") if pins["commit"] else None,
            "image": "inventory" if pins["image_digest"] else None,
        }},
    }
    doc = json.loads(json.dumps(doc))  # JSON-ready: tuples become lists, keys strings
    doc["hash"] = content_hash(doc)
    return doc


def _engine_source(shared: Any, engine_version: str | None) -> str:
    if _get(shared, "llmb_engine_version") is not None:
        return "inventory"
    return "lock" if engine_version else "default"


# where llmbctl.pins says a pin came from -> the document's words (inventory / lock / resolved / default)
_MODEL_SOURCE = {"lock": "lock", "hub": "resolved"}
_IMAGE_SOURCE = {"ref": "inventory", "inventory": "inventory", "lock": "lock", "registry": "resolved"}


def build(
    hostvars: Any,
    groups: dict[str, Any],
    run_id: str | None = None,
    artifacts_dir: str | None = None,
    data_dir: str | None = None,
    host_set: dict[str, list[str]] | None = None,
    inventory_dir: str | None = None,
    write: bool = True,
    repin: bool | None = None,
    inventory_files: list[str] | None = None,
) -> dict[str, Any]:
    """The document stage 0 writes: ``resolve`` with the engine release of the inventory's lock, then
    ``pin`` (no inventory_dir: ``resolve`` alone). ``write``: record the pins (False in check mode and
    for scripts/launch-plan); ``repin``: None reads -e llmb_repin / LLMB_REPIN."""
    if not inventory_dir:
        return resolve(hostvars, groups, run_id, artifacts_dir, data_dir, host_set=host_set,
                       inventory_files=inventory_files)
    from . import pins as P
    from .catalog import Catalog, CatalogError

    groups = {str(k): list(v or []) for k, v in dict(groups).items()}
    shared = _shared_vars(hostvars, groups)
    if _get(shared, "llmb_rollback_to") not in (None, ""):
        return rollback_document(hostvars, groups, _get(shared, "llmb_rollback_to"), run_id, artifacts_dir, data_dir,
                                 host_set, str(inventory_dir), write, inventory_files)
    if repin is None:
        repin = P.repin_requested(_get(shared, "llmb_repin"))
    first: list[dict[str, Any]] = []
    locked = None
    engine = _get(shared, "llmb_engine")
    if isinstance(engine, str) and _get(shared, "llmb_engine_version") is None:
        try:
            lock = P.read_lock(P.lock_path(inventory_dir))
            shipped = Catalog(data_dir).flagset_versions(engine)
            version, source = P.resolve_engine(engine, None, shipped, lock, repin=repin)
            locked = version if source == "lock" else None
        except P.PinError as err:
            first.append(err.problem.to_dict())
        except CatalogError:
            pass  # the planner reports the catalog's problem
    doc = resolve(hostvars, groups, run_id, artifacts_dir, data_dir, host_set=host_set,
                  inventory_files=inventory_files, engine_version=locked)
    doc = pin(doc, hostvars, groups, str(inventory_dir), write=write and not first, repin=repin)
    if first and doc.get("planned"):
        doc["pins"]["problems"] = first + doc["pins"]["problems"]
        doc["pins"]["resolved"] = False
        doc["hash"] = content_hash(doc)
    return doc


def rollback_document(
    hostvars: Any,
    groups: dict[str, Any],
    to: Any,
    run_id: str | None,
    artifacts_dir: str | None,
    data_dir: str | None,
    host_set: dict[str, list[str]] | None,
    inventory_dir: str,
    write: bool,
    inventory_files: list[str] | None,
) -> dict[str, Any]:
    """-e llmb_rollback_to=N (llmb rollback): the document applied when lock N was current, as it was
    (llmbctl.lockhistory), with this run's id; its lock becomes llmb.lock.json again (not in check
    mode). Nothing is planned anew, so every stage gets the argv, environment and units of then. A
    bad N, or a history entry for other hosts, is a pins problem that refuses the stages needing the plan."""
    from . import lockhistory as H
    from . import pins as P

    problem = None
    try:
        n = int(str(to).strip())
        if n < 1:
            raise ValueError
    except ValueError:
        n = None
        problem = {"check": "rollback", "message": f"llmb_rollback_to: {to!r} is not an entry number",
                   "found": str(to)[:80], "expected": "an integer >= 1 (llmb rollback -i INV --to N)",
                   "fix": f"list the entries: llmb rollback -i {inventory_dir} --list", "host": None}
    if n is not None:
        try:
            entry = H.load(inventory_dir, n)
        except H.HistoryError as err:
            problem = {"check": "rollback", "message": str(err), "found": f"llmb_rollback_to={n}",
                       "expected": "an entry of the lock history", "fix": "name an entry that exists (--list)",
                       "host": None}
        else:
            doc = json.loads(json.dumps(entry["deployment"]))
            wanted = sorted(doc.get("hosts") or {})
            have = sorted(str(h) for h in groups.get(GROUP) or [])
            if wanted != have:
                problem = {"check": "rollback", "message": f"lock history entry {n} was applied to other hosts",
                           "found": ", ".join(have)[:200], "expected": ", ".join(wanted)[:200],
                           "fix": "roll back with the inventory of then, or bring the hosts up with llmb up",
                           "host": None}
            else:
                if write:
                    P.write_lock(P.lock_path(inventory_dir), entry["lock"])
                out = {"schema": doc.get("schema"), "run": {"id": run_id, "artifacts_dir": artifacts_dir}}
                out.update((k, v) for k, v in doc.items() if k not in ("schema", "run"))
                out["pins"] = dict(out.get("pins") or {}, lock=str(P.lock_path(inventory_dir)),
                                   sources=dict((out.get("pins") or {}).get("sources") or {}, rollback=n))
                out["hash"] = content_hash(out)
                return out
    doc = resolve(hostvars, groups, run_id, artifacts_dir, data_dir, host_set=host_set, inventory_files=inventory_files)
    if doc.get("planned"):
        doc["pins"] = dict(doc["pins"], resolved=False, problems=[problem])
    else:
        doc["problems"] = [*doc["problems"], problem]
    doc["hash"] = content_hash(doc)
    return doc


def locked_engine_version(
    hostvars: Any, groups: dict[str, Any], inventory_dir: str, repin: bool | None = None
) -> str | None:
    """The release the inventory's lock records for its engine when the inventory leaves
    llmb_engine_version unset and no repin is asked (scripts/launch-plan plans with it); else None."""
    from . import pins as P

    shared = _shared_vars(hostvars, {str(k): list(v or []) for k, v in dict(groups).items()})
    if repin is None:
        repin = P.repin_requested(_get(shared, "llmb_repin"))
    if repin or _get(shared, "llmb_engine_version") is not None:
        return None
    try:
        return P.locked_engine(_get(shared, "llmb_engine"), P.read_lock(P.lock_path(inventory_dir)))
    except P.PinError:
        return None


def pin(
    doc: dict[str, Any],
    hostvars: Any,
    groups: dict[str, Any],
    inventory_dir: str,
    write: bool = True,
    repin: bool | None = None,
) -> dict[str, Any]:
    """The document with its pins resolved (llmbctl.pins): the model commit at the hub, image digests at
    the registry, recorded in <inventory_dir>/llmb.lock.json (not written when ``write`` is False,
    e.g. in check mode). Problems go to ``pins.problems``; a document that was not planned is
    returned as it is (its problems already refuse the stages that need it)."""
    from . import pins as P  # network clients load only here

    if not doc.get("planned"):
        return doc
    shared = _shared_vars(hostvars, {str(k): list(v or []) for k, v in dict(groups).items()})
    model, engine = doc["model"], doc["engine"]
    image = engine.get("image") or None
    token = _get(shared, "weights_hf_token")
    token = (token if isinstance(token, str) else None) or os.environ.get("HF_TOKEN") or None  # a Vaulted one stays shut
    result, problems = P.resolve_pins(
        inventory_dir=inventory_dir,
        model_name=model.get("profile"),
        repo_id=model.get("repo_id"),
        revision=model.get("commit") or model.get("revision"),
        hf_endpoint=_get(shared, "weights_hf_endpoint") or os.environ.get("HF_ENDPOINT") or None,
        hf_token=token,
        images=[image["ref"]] if image and image.get("ref") else [],
        image_pins=_get(shared, "engine_image_pins") or {},
        engine={"name": engine.get("name"), "version": engine.get("version")},
        registry_auth=_get(shared, "engine_image_registry_auth") or [],
        repin=repin,
        write=write,
    )
    out = json.loads(json.dumps(doc))
    if result.get("model"):
        out["model"]["commit"] = result["model"]["commit"]
    if image and image.get("ref") in (result.get("images") or {}):
        out["engine"]["image"]["digest"] = result["images"][image["ref"]]["digest"]
    sources = dict((doc.get("pins") or {}).get("sources") or {})
    if result.get("model"):
        sources["model"] = _MODEL_SOURCE.get(result["model"]["source"], sources.get("model") or "inventory")
    if image and image.get("ref") in (result.get("images") or {}):
        sources["image"] = _IMAGE_SOURCE.get(result["images"][image["ref"]]["source"], "inventory")
    out["pins"] = {
        "resolved": not problems,
        "lock": result.get("lock"),
        "problems": [p.to_dict() for p in problems],
        "sources": sources,
    }
    out["hash"] = content_hash(out)
    return out


def canonical(doc: dict[str, Any]) -> str:
    """Canonical JSON of the document's content: sorted keys, no run, no hash, no pins.sources."""
    body = {k: v for k, v in doc.items() if k not in ("run", "hash")}
    if isinstance(body.get("pins"), dict) and "sources" in body["pins"]:
        body["pins"] = {k: v for k, v in body["pins"].items() if k != "sources"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def content_hash(doc: dict[str, Any]) -> str:
    """sha256 of the document's content: the same inventory gives the same hash in every run."""
    return "sha256:" + hashlib.sha256(canonical(doc).encode("utf-8")).hexdigest()


def dumps(doc: dict[str, Any]) -> str:
    """The document as written to deployment.json (key order as resolved, 2-space indent)."""
    return json.dumps(doc, indent=2) + "\n"


def host_view(doc: dict[str, Any], host: str) -> dict[str, Any]:
    """What one host is given: every shared section, and ``host`` = its own entry (no other host's)."""
    view = {k: v for k, v in doc.items() if k != "hosts"}
    mine = (doc.get("hosts") or {}).get(host)
    view["host"] = dict(mine, name=host) if mine else {
        "name": host,
        "address": None,
        "rank": None,
        "config_patches": [],
        "packages": [],
        "plan": None,
    }
    return view


def write(doc: dict[str, Any], path: str) -> bool:
    """Write the document atomically (llmb.fsutil); False when the file already holds it."""
    return write_text_if_changed(path, dumps(doc))
