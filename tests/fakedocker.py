"""A stand-in for the docker CLI, enough of it for llmb.container (tests only).

``FakeDocker()(argv) -> (rc, stdout, stderr)`` answers `image inspect`, `container inspect`, `run`,
`start`, `rm -f` and `logs` from an in-memory state that tests arrange (images, containers) and
read back (``calls``, the env files `run` was given). ``main()`` is the same as an executable whose
state lives in the JSON file $FAKE_DOCKER_STATE (for running the Ansible module itself).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MUTATING = ("run", "start", "rm", "stop", "kill")


class FakeDocker:
    def __init__(self, state: dict[str, Any] | None = None):
        state = state or {}
        self.images: dict[str, dict] = state.get("images", {})
        self.containers: dict[str, dict] = state.get("containers", {})
        self.calls: list[list[str]] = state.get("calls", [])
        self.env_files: list[str] = state.get("env_files", [])
        # what the next `run` / `start` does: {"rc": 125, "err": "..."} or {"exit": 1, "logs": "..."}
        self.on_run: dict = state.get("on_run", {})

    def to_state(self) -> dict[str, Any]:
        return {"images": self.images, "containers": self.containers, "calls": self.calls,
                "env_files": self.env_files, "on_run": self.on_run}

    def add_image(self, ref: str, image_id: str, digests: list[str]) -> None:
        self.images[ref] = {"Id": image_id, "RepoDigests": digests}

    def mutations(self) -> list[list[str]]:
        return [c for c in self.calls if c[1] in MUTATING]

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        assert argv[0] == "docker", argv
        verb = argv[1]
        if verb == "inspect" or (verb == "container" and argv[2] == "inspect" and "-f" in argv):
            # `docker [container] inspect -f '{{.State.Pid}}' | '{{json .State}}' NAME` (llmb_service_ready)
            c = self.containers.get(argv[-1])
            if c is None:
                return 1, "", f"Error: No such object: {argv[-1]}"
            fmt = argv[argv.index("-f") + 1]
            if fmt == "{{.State.Pid}}":
                return 0, f"{c['State'].get('Pid', 0)}\n", ""
            if fmt == "{{json .State}}":
                return 0, json.dumps(c["State"]) + "\n", ""
            return 1, "", f"fake docker: unsupported format {fmt}"
        if verb in ("image", "container") and argv[2] == "inspect" and "-f" not in argv:
            table = self.images if verb == "image" else self.containers
            doc = table.get(argv[-1])
            if doc is None:
                return 1, "", f"Error: No such {verb}: {argv[-1]}"
            return 0, json.dumps(doc), ""
        if verb == "rm":
            return (0, argv[-1], "") if self.containers.pop(argv[-1], None) else (1, "", "No such container")
        if verb == "logs":
            c = self.containers.get(argv[-1])
            return (0, c.get("_logs", ""), "") if c else (1, "", "No such container")
        if verb == "start":
            c = self.containers.get(argv[-1])
            if c is None:
                return 1, "", "No such container"
            self._started(c)
            return 0, argv[-1], ""
        if verb == "run":
            return self._run(argv)
        return 1, "", f"fake docker: unsupported {argv}"

    def _run(self, argv: list[str]) -> tuple[int, str, str]:
        name = argv[argv.index("--name") + 1]
        if name in self.containers:
            return 125, "", f'docker: Error response from daemon: Conflict. The container name "/{name}" is already in use.'
        label_kv = argv[argv.index("--label") + 1]
        key, _, value = label_kv.partition("=")
        if "--env-file" in argv:
            with open(argv[argv.index("--env-file") + 1]) as fh:
                self.env_files.append(fh.read())
        image = next((a for a in argv if a in self.images), None)
        if image is None:
            return 125, "", "Unable to find image locally"
        fail = self.on_run.get("rc")
        c = {"Name": "/" + name, "Image": self.images[image]["Id"], "Config": {"Labels": {key: value}},
             "State": {"Status": "created", "Running": False, "Pid": 0, "ExitCode": 0}, "RestartCount": 0,
             "_argv": argv}
        self.containers[name] = c
        if fail:
            return int(fail), "", self.on_run.get("err", "docker: Error response from daemon: failed")
        self._started(c)
        return 0, "0123abcd", ""

    def _started(self, c: dict) -> None:
        if "exit" in self.on_run:
            c["State"] = {"Status": "restarting", "Running": True, "Restarting": True, "Pid": 0,
                          "ExitCode": int(self.on_run["exit"]), "Error": ""}
            c["RestartCount"] = int(c.get("RestartCount") or 0) + 1
            c["_logs"] = self.on_run.get("logs", "")
        else:
            c["State"] = {"Status": "running", "Running": True, "Restarting": False, "Pid": 0, "ExitCode": 0}


def main() -> int:
    path = os.environ["FAKE_DOCKER_STATE"]
    with open(path) as fh:
        fake = FakeDocker(json.load(fh))
    rc, out, err = fake(["docker", *sys.argv[1:]])
    with open(path, "w") as fh:
        json.dump(fake.to_state(), fh)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main())
