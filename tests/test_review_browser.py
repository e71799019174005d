"""The review sheet in a real browser (headless Chromium): the embedded figure decodes (natural width > 0) and the
screenshot shows it — the pixels where the page lays the image out match the figure file. Skips without Chromium."""
import json, re, shutil, subprocess
from pathlib import Path
import numpy as np
import pytest
from PIL import Image

from docbench_nb.demo import demo_corpus_dir
from docbench_nb.latex.corpus import load_papers
from docbench_nb.queries.evidence import Draft, extract_evidence
from docbench_nb.queries.review import write_review_sheet

CHROMIUM = next((shutil.which(c) for c in ('chromium', 'chromium-browser', 'google-chrome') if shutil.which(c)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason='chromium not installed (apt-get install -y chromium)')
W, H = 1200, 1400


def _chromium(*args, timeout=120):
    cmd = [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--hide-scrollbars',
           '--force-device-scale-factor=1', f'--window-size={W},{H}', '--virtual-time-budget=5000', *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope='module')
def sheet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('review')
    papers, _ = load_papers(demo_corpus_dir(), cache_dir=tmp / 'c', progress=False)
    paper = next(p for p in papers if p.id == 'bat-activity-streetlights')
    evs, _ = extract_evidence([paper], types=('figure',), per_paper=1, cache_dir=tmp / 'c')
    ev = evs[0]
    d = Draft.from_evidence(ev)
    d.query, d.answer, d.rephrasings, d.flags = 'Which bat guild avoids converted LED streetlights?', 'Myotis', ['a', 'b', 'c'], ['ambiguous']
    html = write_review_sheet([d], {ev.id: ev}, tmp / 'review.html').read_text()
    # a copy that also writes where the image was laid out into the DOM (the sheet itself stays as shipped)
    probe = html.replace('</body>', '<script>window.addEventListener("load",()=>{const i=document.querySelector("img.figure");'
                         'const r=i.getBoundingClientRect();document.body.dataset.box=JSON.stringify([r.left,r.top,r.width,r.height,'
                         'i.naturalWidth,i.naturalHeight]);});</script></body>')
    (tmp / 'probe.html').write_text(probe)
    return tmp, ev


def test_figure_decodes_in_the_browser(sheet):
    tmp, ev = sheet
    r = _chromium('--dump-dom', (tmp / 'review.html').as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<img class="figure"[^>]*data-natural="(\d+)"', r.stdout)
    assert m, 'the figure image never loaded (no data-natural attribute)'
    with Image.open(ev.images[0]) as im: assert int(m.group(1)) == im.width > 0
    assert 'Which bat guild avoids' in r.stdout and 'ambiguous' in r.stdout


def test_screenshot_shows_the_figure(sheet):
    tmp, ev = sheet
    r = _chromium('--dump-dom', (tmp / 'probe.html').as_uri())
    box = json.loads(re.search(r'data-box="([^"]+)"', r.stdout).group(1).replace('&quot;', '"'))
    x, y, w, h, nw, nh = box
    assert w > 50 and h > 50 and y + h <= H, f'image laid out at {box}, outside the {W}x{H} viewport'
    shot = tmp / 'shot.png'
    r = _chromium(f'--screenshot={shot}', (tmp / 'probe.html').as_uri())
    assert shot.is_file(), r.stderr[-2000:]
    page = np.asarray(Image.open(shot).convert('L'), dtype=float)
    assert page.std() > 5                                              # not a blank page
    crop = page[round(y):round(y) + round(h), round(x):round(x) + round(w)]
    with Image.open(ev.images[0]) as im:
        ref = np.asarray(im.convert('L').resize((crop.shape[1], crop.shape[0]), Image.BILINEAR), dtype=float)
    err = np.abs(crop - ref).mean()
    shifted = np.abs(page[round(y):round(y) + crop.shape[0], :crop.shape[1]] - ref).mean()   # the same-sized region at the left edge
    assert err < 12, f'mean pixel difference {err:.1f} between the screenshot and the figure'
    assert err < shifted / 2, (err, shifted)
