"""llmb_verify: probe the node (accel_probe, one module call), then on the controller parse the
outputs, compare them with the platform profile and write <artifacts>/verify/<host>.json.

Deviations never fail this task: the verify role's last task (llmb_verify_report) fails once with
every deviation of every host. Documentation: plugins/modules/llmb_verify.py.
"""

from __future__ import annotations

import datetime
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmb.finding import check
from llmb.hw.probes import write_bundle
from llmbctl import results
from llmbctl import verify as V
from llmbctl.hw.facts import build_facts
from llmbctl.plugin import ControllerAction

ARG_SPEC = {
    "platform": {"type": "str"},
    "artifacts_dir": {"type": "path"},
    "run_id": {"type": "str"},
    "profile_overrides": {"type": "dict", "default": {}},
    "waive": {"type": "list", "elements": "str", "default": []},
    "timeout": {"type": "int", "default": 60},
    "vendor": {"type": "str", "default": "auto", "choices": ["auto", "nvidia", "amd", "ascend", "none"]},
    "verify": {"type": "bool", "default": True},
    "bundle_dir": {"type": "path"},
    "platforms_dir": {"type": "path"},
}


def _engine_release(task_vars: dict) -> dict | None:
    """The chosen engine release's requirements for engine.driver: the release the deployment
    document names (stage 0 decided it, default the newest shipped), else the inventory's."""
    from llmbctl.catalog import Catalog, CatalogError

    engine = (task_vars.get("llmb_deployment") or {}).get("engine") or {}
    name = engine.get("name") or task_vars.get("llmb_engine")
    version = engine.get("version") or task_vars.get("llmb_engine_version")
    try:
        return Catalog().release_requirements(name, version)
    except CatalogError:
        return None


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC
    _requires_connection = True

    def act(self, args, task_vars, result):
        host = task_vars.get("inventory_hostname")
        if args["verify"] and not args["platform"]:
            raise AnsibleActionFail(f"{host}: llmb_verify needs 'platform' (set llmb_platform for this host)")
        if args["verify"] and not args["artifacts_dir"]:
            raise AnsibleActionFail(f"{host}: llmb_verify needs 'artifacts_dir' to write its result")
        profile = None
        if args["verify"]:
            try:
                profile = V.load_profile(args["platform"], args["platforms_dir"], args["profile_overrides"])
            except ValueError as exc:
                raise AnsibleActionFail(f"{host}: check platform: {exc}") from None

        started = datetime.datetime.now(datetime.UTC)
        module_args = {"vendor": args["vendor"], "timeout": args["timeout"]}
        if profile is not None and profile["vendor"] == "ascend":
            # net health only when the profile checks it: hccn_tool runs once per device and query.
            # the gateway always (HCCL across nodes on a routed RoCE network needs one: issue #30).
            module_args["hccn_queries"] = ["link", "ip", "gateway"] + (["net_health"] if (profile.get("hccn") or {}).get(
                "net_health") else [])
        probe = self._execute_module(module_name="accel_probe", module_args=module_args, task_vars=task_vars)
        if probe.get("failed"):
            facts = {"vendor": None, "devices": [], "errors": [], "warnings": []}
            checks = [check("probe.accel_probe", False, "the accel_probe module runs on the node",
                            str(probe.get("msg") or probe.get("module_stderr") or "failed")[:500],
                            "python3 must exist on the node; see the module error above")]
            raw = {"probes": [], "vendor": None}
        else:
            raw = probe
            facts = build_facts(probe["probes"], probe.get("vendor"))
            plan = ((task_vars.get("llmb_deployment") or {}).get("host") or {}).get("plan")
            checks = V.verify(facts, profile, args["waive"], engine=_engine_release(task_vars),
                              deepep=V.uses_deepep(plan)) if profile else []

        out: dict = {"changed": False}
        if args["bundle_dir"] and raw["probes"]:
            hdir = os.path.join(args["bundle_dir"], host)
            write_bundle(raw, hdir)
            probes = [{k: p[k] for k in ("name", "kind", "cmd", "rc", "duration_s")} for p in raw["probes"]]
            results.write_json(os.path.join(hdir, "meta.json"),
                               {"host": host, "node_hostname": raw.get("host"), "vendor": raw.get("vendor"),
                                "tools": raw.get("tools"), "collected_at": started.isoformat(timespec="seconds"),
                                "run_id": args["run_id"], "probes": probes})
            out["bundle"] = hdir
        if profile is None:
            out.update(vendor=raw.get("vendor"), probes=[p["name"] for p in raw["probes"]])
            return {**result, **out}

        summary = V.summarize(host, profile, checks, facts)
        summary.update({
            "run_id": args["run_id"],
            "started": started.isoformat(timespec="seconds"),
            "probe_seconds": raw.get("duration_s"),
            "node_hostname": raw.get("host"),
            "vendor": facts.get("vendor"),
            "driver_version": facts.get("driver_version"),
            "facts": facts,
        })
        path = results.result_path(args["artifacts_dir"], "verify", host)
        results.write_json(path, summary)
        failed = [c for c in checks if not c["ok"]]
        out.update({
            "ok": summary["ok"],
            "platform": profile["name"],
            "result_file": path,
            "node_hostname": raw.get("host"),  # the node's own name: the fabric's mpirun launcher goes by it
            "counts": summary["counts"],
            "failed_checks": failed,
            "firmware": V.node_firmware(facts, profile["name"]),
            "rails": sorted({p["name"] for p in V.rail_ports(facts, profile)}),
            "hccn_addresses": V.hccn_addresses(facts),  # Ascend: the fabric play pings these across nodes
            "msg": (f"{host}: all {len(checks)} checks of {profile['name']} passed" if not failed else
                    f"{host}: {len(failed)} of {len(checks)} checks of {profile['name']} failed: "
                    + ", ".join(c["id"] for c in failed)),
            "ansible_facts": {"llmb_accel": {
                "vendor": facts.get("vendor"), "driver_version": facts.get("driver_version"),
                "device_count": len(facts.get("devices") or []),
                "models": sorted({d.get("model") for d in facts.get("devices") or [] if d.get("model")}),
                "verify_ok": summary["ok"],
                # the RDMA devices with an active port (ibstat): a disaggregated plan's KV transfer devices
                "cpu_amx": facts.get("cpu_amx"),
                # whose host these are: the fact cache is keyed by host name alone, and another
                # inventory on this controller may name a host the same (the planner drops them then)
                "inventory_dir": task_vars.get("inventory_dir"),
                "rdma_devices": sorted({p["name"] for p in facts.get("rdma_ports") or []
                                        if str(p.get("state") or "").lower() == "active"}),
            }},
        })
        return {**result, **out}
