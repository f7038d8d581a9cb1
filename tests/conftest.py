"""Shared pytest configuration: hypothesis profiles and optional-dependency skips."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Scripts that the MPI tests launch under mpiexec: not test modules, and not importable
# by pytest's doctest collection (they run on import).
collect_ignore_glob = ["mpi/*"]

# CI runs a fixed, derandomised example set so that a red build is reproducible.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_configure(config):
    # Two cores shared by MPI ranks and torch: torch's intra-op threads only add contention
    # for the tiny tensors of the test suite.
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def h100_ground_truth():
    """``shared/ground-truth/h100`` beside the repository (measured on a real H100); skip without it."""
    folder = Path(__file__).resolve().parents[2] / "shared" / "ground-truth" / "h100"
    if not folder.is_dir():
        pytest.skip(f"no ground truth files in {folder}")
    return folder
