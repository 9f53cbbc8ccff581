"""Filters of the engine_image role (controller side); the logic is llmbctl.images.

    ref:  "{{ 'vllm/vllm-openai:v0.19.1' | llmb_image_parse }}"     # registry, path, tag, repository, name
    pull: "{{ image | llmb_image_pull_ref(digest, mirror) }}"        # <registry or mirror>/<path>@<digest>
    hint: "{{ stderr | llmb_image_pull_hint }}"
    ok:   "{{ digest | llmb_is_digest }}"
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from llmbctl import images
from llmbctl.plugin import reraise_each


def llmb_image_parse(reference):
    return images.parse(str(reference)).to_dict()


def llmb_image_pull_ref(image, digest, mirror=""):
    return images.pull_ref(str(image), str(digest or ""), str(mirror or ""))


def llmb_image_pull_hint(stderr):
    return images.diagnose_pull(str(stderr or ""))


def llmb_is_digest(value):
    return images.is_digest(str(value or ""))


class FilterModule:
    def filters(self):
        return reraise_each(
            (llmb_image_parse, llmb_image_pull_ref, llmb_image_pull_hint, llmb_is_digest),
            images.ImageError, AnsibleFilterError, "engine_image: ",
        )
