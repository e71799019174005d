"""The user guide (`nbs/guide/`): every page has a title and a summary, cites studies rather than internal files,
checks what its examples show, and keeps unexecuted cells to the few that need Ray. The pages themselves are executed
by `nbdev_test` (settings.ini: recursive) like every other notebook; this file only checks their shape, fast."""
import json, re
from pathlib import Path
import pytest

GUIDE = Path(__file__).resolve().parents[1] / 'nbs' / 'guide'
PAGES = sorted(GUIDE.glob('*.ipynb'))
TOPICS = ['quickstart', 'your_corpus', 'cli', 'config_cache', 'models', 'build_queries', 'reproduce_study', 'ray']


def _cells(p):
    return [(c['cell_type'], ''.join(c['source'])) for c in json.loads(p.read_text(encoding='utf-8'))['cells']]


def test_every_topic_has_a_page():
    names = [re.sub(r'^\d+_', '', p.stem) for p in PAGES]
    assert names == TOPICS, names


@pytest.mark.parametrize('page', PAGES, ids=[p.stem for p in PAGES])
def test_page_shape(page):
    cells = _cells(page)
    kind, first = cells[0]
    assert kind == 'markdown' and first.startswith('# ') and '\n> ' in first, 'an H1 title, then a one-line `>` summary'
    text = '\n'.join(s for _, s in cells)
    assert not re.search(r'DESIGN\.md|\.\./shared|/work/', text), 'the guide cites studies and public paths, not internal files'
    code = [s for k, s in cells if k == 'code']
    assert any('test_eq(' in s or 'test(' in s for s in code), 'examples are checked, not only shown'
    assert not any('#| export' in s or '#| default_exp' in s for s in code), 'guide pages export nothing'
    skipped = [s for s in code if '#| eval: false' in s]
    assert len(skipped) <= (1 if page.stem.endswith('_ray') else 0), 'only the Ray run is shown without running'


def test_cli_page_is_generated_from_the_parser():
    text = '\n'.join(s for _, s in _cells(GUIDE / '03_cli.ipynb'))
    assert 'walk_parsers(' in text and 'format_help()' in text and 'build_parser()' in text


def test_study_citations():
    text = '\n'.join(s for p in PAGES for _, s in _cells(p))
    assert 'REAL-MM-RAG (Wasserman et al., 2025)' in text and 'Multi3IR' in text and 'SPIN' in text and 'the representation study' in text and '8,210' in text
