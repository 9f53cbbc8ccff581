"""Role variables whose value the deployment document holds: refused in an inventory, naming the
``llmb_*`` knob to set instead."""

from __future__ import annotations

from .model import Problem

# Role variables whose value the deployment document holds (stage 0 decides it once; the roles read
# it from llmb_deployment). Set in an inventory they would override the document without a word, so
# check_variables refuses them and names what to set instead. The Molecule scenarios and the perf
# harnesses that run a role alone may still hand them in with LLMB_ROLE_TEST_VARS=1 in the
# environment (a test-only route: an inventory cannot set an environment variable).
DOC_OWNED: dict[str, tuple[str, str]] = {
    "engine_host_engine": ("engine.name", "llmb_engine"),
    "engine_host_version": ("engine.version", "llmb_engine_version"),
    "engine_host_venv": ("engine.venv", "llmb_engine_venv"),
    "engine_host_packages": ("hosts.<host>.packages", "llmb_engine (the plan names the packages each planned service runs)"),
    "engine_host_channel": ("engine.channel", "llmb_platform (the channel follows the platform's vendor)"),
    "engine_image_image": ("engine.image.ref", "llmb_container_image"),
    "engine_image_digest": ("engine.image.digest", "engine_image_pins ({IMAGE: {digest: sha256:...}})"),
    "engine_image_id": ("engine.image.id", "engine_image_pins ({IMAGE: {id: sha256:...}})"),
    "weights_model": ("model.profile", "llmb_model"),
    "weights_repo_id": ("model.repo_id", "llmb_model (a profile under data/models/ names the repository)"),
    "weights_revision": ("model.commit", "llmb_model_revision (resolved and locked in llmb.lock.json)"),
    "weights_allow_patterns": ("model.allow_patterns", "llmb_model (the profile's files.allow_patterns)"),
    "weights_dir": ("model.dir", "llmb_model_dir"),
    "weights_config_patches": ("hosts.<host>.config_patches", "llmb_model (the profile's config patches)"),
    "ssh_mesh_dir": ("dirs.ssh_mesh", "llmb_ssh_mesh_dir"),
    "ssh_mesh_container_sshd": ("engine.name", "llmb_engine (trtllm runs the container sshd)"),
    "ssh_mesh_container_port": ("ports.sshd", "llmb_sshd_port"),
    "verify_platform": ("platform.name", "llmb_platform"),
    "verify_run_id": ("run.id", "llmb_run_id (LLMB_RUN_ID)"),
    "verify_artifacts_dir": ("run.artifacts_dir", "llmb_artifacts_dir (LLMB_ARTIFACTS_DIR)"),
}
ROLE_TEST_VARS_ENV = "LLMB_ROLE_TEST_VARS"


def doc_owned_problem(name: str) -> Problem:
    """The refusal of a role variable that would override the deployment document."""
    field_, instead = DOC_OWNED[name]
    knob = instead.split(" ", 1)[0]
    return Problem(
        check="document-owned",
        message=f"{name} is set in the inventory, but its value is the deployment document's {field_}: "
        f"the role reads the document, and {name} would silently override it",
        found=name,
        expected=f"{knob} (the document's {field_} is resolved from it once, in stage 0)",
        fix=f"remove {name} and set {instead} instead",
    )
