"""The offline docs site as a reader sees it: three pages (the API page, an analysis page, the CLI reference) built by
`docbench_nb.docs.build_site` (executed, through nbdev's docs processors) and opened in headless Chromium at desktop
(1280 px) and phone (390 px) width. Fails on a horizontal scrollbar, a visible `#| ` directive, an `In [n]:` prompt,
a warning box, or a page without reference entries / sidebar / search; saves the screenshots to results/docs/."""
import html, json, re, shutil, subprocess
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = {'12_api': 'Public API', '04_evaluation-11_robustness': 'Rephrasing robustness', '11_cli': 'Command line'}
WIDTHS = {'desktop': (1280, 900), 'phone': (390, 844)}
SHOT_HEIGHT = {'desktop': 2200, 'phone': 2400}   # screenshots show more than one screen: the entries below the intro
SHOTS = ROOT / 'results' / 'docs'

# The page is opened in an iframe of the given width (a headless window is never narrower than 500 px), and after
# it loads this measures its overflow, reads its visible text, tries its search box, and writes it all out as JSON.
PROBE = """<!DOCTYPE html><html><body style="margin:0"><script>
function probe(){
 var w = document.getElementById('f').contentWindow, doc = w.document, d = doc.documentElement, q = doc.getElementById('q');
 var warn = Array.from(doc.querySelectorAll('[class*=stderr],[class*=warning],.alert,.output_error'))
   .filter(function(e){ return /Warning|IProgress/.test(e.innerText); }).length;
 var hits = -1;
 if (q) { q.value = 'significance'; q.dispatchEvent(new w.Event('input')); hits = doc.querySelectorAll('#hits a[href]').length; }
 var p = document.createElement('pre'); p.id = 'probe-result';
 p.textContent = JSON.stringify({scrollWidth: d.scrollWidth, innerWidth: w.innerWidth, text: doc.body.innerText, warnBoxes: warn,
   entries: doc.querySelectorAll('.docentry').length, side: doc.querySelectorAll('#side a').length, hits: hits});
 document.body.appendChild(p);
}</script><iframe id="f" src="PAGE" style="width:WIDTHpx;height:HEIGHTpx;border:0" onload="probe()"></iframe></body></html>"""

def _chromium():
    return next((c for c in ('chromium', 'chromium-browser', 'google-chrome') if shutil.which(c)), None)

def _run(browser, *args):
    cmd = [browser, '--headless', '--no-sandbox', '--disable-gpu', '--hide-scrollbars', '--run-all-compositor-stages-before-draw',
           '--virtual-time-budget=5000', *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)

@pytest.fixture(scope='module')
def site(tmp_path_factory):
    browser = _chromium()
    if browser is None: pytest.skip('chromium is not installed (make sysdeps installs it)')
    from docbench_nb.docs import build_site
    out = tmp_path_factory.mktemp('site')
    st = build_site(ROOT / 'nbs', out, only=list(PAGES), workers=2)
    assert st['pages'] == len(PAGES)
    return browser, out

def _probe(browser, out, page, width, height):
    probe = out / f'_probe_{page}_{width}.html'
    probe.write_text(PROBE.replace('PAGE', f'{page}.html').replace('WIDTH', str(width)).replace('HEIGHT', str(height)), encoding='utf-8')
    r = _run(browser, '--allow-file-access-from-files', f'--window-size={max(width, 800) + 40},{height + 40}', '--dump-dom', probe.as_uri())
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', r.stdout, re.S)
    assert m, f'no probe result from chromium for {page} at {width}px: {r.stderr[-2000:]}'
    return json.loads(html.unescape(m.group(1)))

@pytest.mark.parametrize('page', list(PAGES))
@pytest.mark.parametrize('form', list(WIDTHS))
def test_page_reads_as_documentation(site, page, form):
    browser, out = site
    width, height = WIDTHS[form]
    src = (out / f'{page}.html').read_text(encoding='utf-8')
    assert '<h1 id=' in src and PAGES[page] in src
    assert 'output_stderr' not in src and 'TqdmWarning' not in src and 'IProgress not found' not in src
    p = _probe(browser, out, page, width, height)
    assert p['innerWidth'] == width and p['scrollWidth'] <= p['innerWidth'], f"{page} at {width}px scrolls sideways ({p['scrollWidth']} > {p['innerWidth']})"
    bad = [l for l in p['text'].splitlines() if re.match(r'\s*#\|', l)]
    assert not bad, f'visible directives on {page}: {bad[:5]}'
    assert not re.search(r'\b(In|Out)\s*\[\s*\d*\s*\]:', p['text']), f'notebook prompts on {page}'
    assert p['warnBoxes'] == 0, f'warning box on {page}'
    assert p['entries'] > 0, f'no show_doc reference entries on {page}'
    assert p['side'] == len(PAGES) and p['hits'] > 0, (p['side'], p['hits'])
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / f'{page}-{form}-{width}.png'
    _run(browser, f'--window-size={width},{SHOT_HEIGHT[form]}', f'--screenshot={shot}', (out / f'{page}.html').as_uri())
    assert shot.is_file() and shot.stat().st_size > 10_000
