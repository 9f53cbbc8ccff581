"""Controller-side code of llm-bringup (planner, catalog, deployment, pins, report, console, engine
catalog): runs only on the controller, in the project venv. Node-side code is the `llmb` package
(plugins/module_utils/llmb, shipped to hosts by Ansible): llmbctl may import llmb, never the reverse."""

from pathlib import Path

# The checkout this package runs from (installed editable: lib/llmbctl/__init__.py -> repository root);
# data/, roles/ and playbooks/ are beside lib/.
REPO_ROOT = Path(__file__).resolve().parents[2]
