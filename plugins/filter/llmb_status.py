"""Filters of `llmb status` (roles/serve/tasks/status.yml): thin shims over llmb.status."""

from __future__ import annotations

from llmb.status import drift_text, plan_service


class FilterModule:
    def filters(self):
        return {"llmb_status_service": plan_service, "llmb_status_drift_text": drift_text}
