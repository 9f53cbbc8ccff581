"""Filters of `llmb stop` / `llmb start` (roles/serve/tasks/stop.yml, start.yml): thin shims over llmbctl.stopstart."""

from __future__ import annotations

from llmbctl.stopstart import drains, levels


class FilterModule:
    def filters(self):
        return {"llmb_stop_start_levels": levels, "llmb_router_drains": drains}
