"Shared fixtures: `../shared` (read-only research data) is optional; tests needing it skip cleanly."
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared'

def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: loads real models or walks the whole shared corpus')

@pytest.fixture(scope='session')
def shared_dir():
    if not (SHARED / 'corpus' / 'papers').is_dir(): pytest.skip('../shared not present')
    return SHARED

@pytest.fixture(scope='session')
def shared_papers(shared_dir):
    return sorted(p for p in (shared_dir / 'corpus' / 'papers').iterdir() if p.is_dir())
