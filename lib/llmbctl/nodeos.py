"""What the toolkit relies on in a node's operating system, checked by preflight (playbooks/preflight.yml)
from the node's minimal facts, and the node OSes the end-to-end suite boots (README, "Node operating
systems"). No Ansible imports: the action plugin llmb_preflight is a thin wrapper."""

from __future__ import annotations

from typing import Any

from llmb.finding import Finding

MIN_PYTHON = (3, 9)
# (distribution, major version) -> release name: the simulated cluster's images (scripts/build-node-image)
TESTED: dict[tuple[str, str], str] = {("Debian", "12"): "bookworm", ("Debian", "13"): "trixie"}
TESTED_TEXT = ", ".join(f"{d} {v} ({n})" for (d, v), n in TESTED.items())
SSHD_HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"


def _get(facts: dict[str, Any], key: str) -> Any:
    return facts.get(key, facts.get("ansible_" + key))


def os_problems(host: str, facts: dict[str, Any]) -> list[str]:
    """Every missing fact the toolkit relies on, each a finding's line (llmb.finding): host, check, expected, found, fix."""
    out: list[Finding] = []
    system = _get(facts, "system")
    if system != "Linux":
        out.append(Finding("preflight os", expected="Linux", found=system or "unknown",
                           fix="the toolkit drives Linux nodes only"))
    py = _get(facts, "python") or {}
    ver = py.get("version") or {}
    try:
        found = (int(ver.get("major")), int(ver.get("minor")))
    except (TypeError, ValueError):
        found = None
    if found is None or found[0] != 3 or found < MIN_PYTHON:
        shown = f"{found[0]}.{found[1]}" if found else "unknown"
        out.append(Finding(
            "preflight python", expected=f"python3 >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} (node-side modules)",
            found=f"{shown} at {py.get('executable') or 'unknown'}",
            fix="install python3 >= 3.9 or point ansible_python_interpreter at one"))
    mgr = _get(facts, "service_mgr")
    if mgr != "systemd":
        out.append(Finding(
            "preflight systemd", expected="systemd as the service manager (the serve stage writes units, the "
            "weights relay runs under systemd-run)", found=mgr or "unknown"))
    if not _get(facts, "ssh_host_key_ed25519_public"):
        out.append(Finding("preflight sshd", expected=f"sshd with an ed25519 host key ({SSHD_HOST_KEY}; the SSH mesh "
                           "pins it)", found="none", fix="install openssh-server and run ssh-keygen -A"))
    for f in out:
        f.host = host
    return [f.render() for f in out]


def os_untested(host: str, facts: dict[str, Any]) -> str | None:
    """A note when the node's OS is not one the suite tests (it may still work: the checks above passed)."""
    dist = str(_get(facts, "distribution") or "unknown")
    major = str(_get(facts, "distribution_major_version") or "?")
    if (dist, major) in TESTED:
        return None
    return (f"{host}: preflight os: {dist} {major} is not among the tested node OSes ({TESTED_TEXT}); "
            "the facts the toolkit relies on are present, so the run goes on")


def driver_problems(host: str, query_output: str, engine: str, version: str, vendor: str | None,
                    data_dir: str | None = None) -> list[str]:
    """The chosen engine release against the node's NVIDIA driver (``query_output``: what `nvidia-smi
    --query-gpu=driver_version --format=csv,noheader` printed), as verify's engine.driver judges it:
    one finding's line when the driver cannot run it, none when it can or the check does not apply.
    A release the catalog does not know raises ValueError (llmbctl.catalog.CatalogError)."""
    from llmbctl.catalog import Catalog
    from llmbctl.enginecat.requirements import driver_finding, driver_from_query

    rel = Catalog(data_dir or None).release_requirements(str(engine or ""), str(version or ""))
    if rel is None:
        return []
    found = driver_finding(rel["release"], rel["requirements"], driver_from_query(query_output), vendor)
    if found is None or found.ok:
        return []
    line = Finding.from_record(found.check_record(), host)
    line.id = "preflight engine.driver"
    return [line.render()]


def compiler_problems(host: str, confined: str, compiler: str | None) -> list[str]:
    """The serve stage builds the llmb-bindto preload where the plan confines a listener (``confined``:
    the ports, comma-separated): it needs a C compiler (``compiler``: its path, None when none)."""
    if not confined or compiler:
        return []
    return [Finding("preflight bindto.compiler", found="none", host=host,
                    expected=f"a C compiler (cc, gcc or clang) to build the llmb-bindto preload that binds port(s) "
                             f"{confined} to the cluster address",
                    fix="install gcc and the libc headers (apt-get install gcc libc6-dev / dnf install gcc "
                        "glibc-devel), or set llmb_confine_listeners: false (docs/ports.md)").render()]


def preflight_problems(host: str, facts: dict[str, Any], *, engine: str = "", version: str = "",
                       vendor: str | None = None, driver_query: str | None = None, confined: str = "",
                       compiler: str | None = None, data_dir: str | None = None) -> list[str]:
    """Every problem preflight finds on a node, each a finding's line: its OS facts (os_problems), the
    chosen release against its driver where ``driver_query`` is given (an NVIDIA node that is not a
    control node) and a C compiler where the plan confines listeners."""
    out = os_problems(host, facts)
    if driver_query is not None:
        out += driver_problems(host, driver_query, engine, version, vendor, data_dir)
    return out + compiler_problems(host, confined, compiler)
