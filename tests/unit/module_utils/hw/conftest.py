"""Helpers for the hardware-parser tests: the shared captures live in ../shared/fixtures."""

from pathlib import Path

import pytest
from llmb.hw import ParseError, parse

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = (ROOT / ".." / "shared" / "fixtures").resolve()
DATA = Path(__file__).resolve().parent / "data"


def fixture_text(rel: str) -> str:
    path = FIXTURES / rel
    if not path.exists():
        pytest.skip(f"shared fixture {rel} not present at {FIXTURES}")
    return path.read_text(encoding="utf-8")


def data_text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def assert_refused(kind: str, damaged: dict[str, str]) -> None:
    """Each damaged text, parsed as ``kind``, raises ParseError with the message its pattern matches."""
    for text, match in damaged.items():
        with pytest.raises(ParseError, match=match):
            parse(text, kind)
