"""llm-bringup importable logic (no Ansible imports)."""
