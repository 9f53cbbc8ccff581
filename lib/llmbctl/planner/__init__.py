"""Launch planner: from an inventory to per-host services (argv, env, containers, order, health).

Pure Python without Ansible imports; the filter plugin (plugins/filter/llmb_deployment.py), the
preflight playbook and scripts/launch-plan all call ``plan`` / ``check`` from here.
"""

from .core import check, plan, plan_inventory
from .model import HostPlan, PlanError, Planned, Problem, Service

__all__ = ["HostPlan", "PlanError", "Planned", "Problem", "Service", "check", "plan", "plan_inventory"]
