"""Filters over llmbctl.secrets (controller side): the one pattern deciding which names hold secrets.

    no_log: "{{ item.env | llmb_secret_keys | length > 0 }}"
"""

from __future__ import annotations

from llmbctl.secrets import secret_keys


class FilterModule:
    def filters(self):
        return {"llmb_secret_keys": secret_keys}
