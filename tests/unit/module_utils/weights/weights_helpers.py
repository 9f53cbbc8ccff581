"""Constants shared by the weights tests (the generated test model at the test hub)."""

from pathlib import Path

REPO = "llmb-test/kimi-k2-sim"
ALLOW = ["*.safetensors", "*.json", "*.py", "*.jinja", "tiktoken.model"]
ROOT = Path(__file__).resolve().parents[4]
