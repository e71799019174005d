"Rendering: sandbox (shell escape, file reads outside the copy, endless loops), page budget, preamble repairs, fallback, snippets, real papers."
import os, re, shutil, subprocess, unicodedata, uuid, warnings
from pathlib import Path
import pytest
from PIL import Image
from docbench_nb.records import Paper
from docbench_nb.pages import render as R
from docbench_nb.pages import minimal as MIN

pytestmark = pytest.mark.skipif(not (shutil.which('pdflatex') and shutil.which('pdftoppm') and shutil.which('pdftotext')),
                                reason='needs pdflatex (texlive-latex-base) and poppler-utils')


def pdf_text(pdf):
    out = subprocess.run(['pdftotext', str(pdf), '-'], capture_output=True, timeout=60).stdout.decode('utf-8', 'replace')
    return unicodedata.normalize('NFC', out)


def make_paper(d, body, preamble='', cls='article', text=None, pid='p'):
    d = Path(d); d.mkdir(parents=True, exist_ok=True)
    (d / 'main.tex').write_text(f'\\documentclass{{{cls}}}\n{preamble}\n\\begin{{document}}\n{body}\n\\end{{document}}\n')
    return Paper(id=pid, title='T', root=str(d), main_file='main.tex', text=body if text is None else text)


@pytest.fixture
def cache(tmp_path): return tmp_path / 'cache'


@pytest.fixture(autouse=True)
def _private_tmp(tmp_path, monkeypatch):
    "PDFs from `compile_latex(out_dir=None)` land in caller-owned temp folders: keep them inside pytest's tmp_path."
    import tempfile
    (tmp_path / 'tmp').mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path / 'tmp'))


@pytest.fixture
def launches(monkeypatch):
    "Every external tool rendering starts (all go through `run_tool`), in launch order: `[tool, seconds granted, killed, argv]`."
    from docbench_nb.pages import assets, sandbox
    out, real = [], assets.run_tool
    def spy(cmd, timeout, *a, **k):
        rec = [Path(str(cmd[0])).name, float(timeout), False, [str(c) for c in cmd]]; out.append(rec)
        try: return real(cmd, timeout, *a, **k)
        except R.ToolTimeout: rec[2] = True; raise
    for mod in (assets, sandbox, R): monkeypatch.setattr(mod, 'run_tool', spy)
    return out


def assert_one_deadline(launches, total):
    """The tool launches shared one deadline of `total` s, counted from what each was granted, not timed: none was granted
    more than the killed launches before it (each spent its whole grant) left of `total`; after the paper's own compile
    (granted its share of the deadline up front) the grants never grow but to the 1 s a page count always gets, since each
    is what is left of the same deadline (a step given a fresh timeout shows as a rise); and successive rasterizing chunks
    get strictly less (a fresh timeout per chunk shows as equal grants)."""
    spent = 0.0
    for _, g, killed, _ in launches:
        assert g <= total - spent + 1e-6, launches
        if killed: spent += g
    rest = [g for _, g, _, argv in launches if argv[-1] != 'main.tex']
    assert all(b <= max(a, 1.0) for a, b in zip(rest, rest[1:])), launches
    ppm = [g for t, g, _, _ in launches if t == 'pdftoppm']
    assert all(b < a for a, b in zip(ppm, ppm[1:])), launches


def rasterized(launches):
    "The `(first, last)` page range of each pdftoppm launch."
    return [(int(c[c.index('-f') + 1]), int(c[c.index('-l') + 1])) for t, _, _, c in launches if t == 'pdftoppm']


# ---------------------------------------------------------------- sandbox
def test_write18_does_not_run(tmp_path, cache):
    marker = Path('/tmp') / f'pwned_{uuid.uuid4().hex}'
    p = make_paper(tmp_path / 'w', f'Hello. \\immediate\\write18{{touch {marker}}} \\write18{{touch {marker}}} Bye.\\newpage x',
                   text='Hello. Bye.')
    r = R.render_paper(p, cache_dir=cache, timeout=60)
    assert r.path == 'compiled' and len(r.pages) == 2
    assert not marker.exists()
    assert 'Hello.' in pdf_text(r.pdf)


def _secret_lines():
    lines = [l.strip() for l in Path('/etc/passwd').read_text().splitlines() if len(l.strip()) > 12]
    return lines[:3]


@pytest.mark.parametrize('attack', [r'\input{/etc/passwd}', r'\input{../../etc/hostname}', r'\include{/etc/passwd}',
                                    r'\openin5=/etc/passwd \read5 to\leak \leak',
                                    r'\IfFileExists{/etc/passwd}{\input{/etc/passwd}}{}',
                                    r'\immediate\openout3=../escaped.tex \immediate\write3{x}\immediate\closeout3'])
def test_no_reads_or_writes_outside_the_copy(tmp_path, cache, attack):
    d = tmp_path / 'a' / 'b' / 'paper'
    p = make_paper(d, f'Visible start. {attack} Visible end.', text='Visible start. Visible end.')
    r = R.render_paper(p, cache_dir=cache, timeout=60)
    assert r.path in ('compiled', 'repaired', 'fallback') and r.pdf           # a refused \input is dropped ('repaired')
    txt = pdf_text(r.pdf)
    assert 'Visible' in txt
    for secret in _secret_lines(): assert secret not in txt
    host = Path('/etc/hostname').read_text().strip() if Path('/etc/hostname').exists() else ''
    if len(host) >= 6: assert host not in txt
    assert not (d.parent / 'escaped.tex').exists() and not (d / 'main.aux').exists()


def test_relative_escape_from_a_deep_tree_is_refused(tmp_path, cache):
    secret = f'SECRET{uuid.uuid4().hex[:10]}'
    (tmp_path / 'secret.tex').write_text(secret)
    d = tmp_path / 'x' / 'paper'
    pdf, log = R.compile_latex(make_paper(d, r'Start \input{../../secret} End').root, 'main.tex', timeout=60)
    assert pdf is None or secret not in pdf_text(pdf)
    assert 'openin_any = p' in log or 'not found' in log


def test_symlink_out_of_the_tree_is_not_followed(tmp_path, cache):
    secret = f'SECRET{uuid.uuid4().hex[:10]}'
    (tmp_path / 'outside.tex').write_text(secret)
    d = tmp_path / 'paper'
    make_paper(d, r'Start \IfFileExists{link.tex}{\input{link}}{NOLINK} End')
    os.symlink(tmp_path / 'outside.tex', d / 'link.tex')
    (d / 'inside.tex').write_text('INSIDEOK'); os.symlink(d / 'inside.tex', d / 'ok.tex')
    (d / 'main.tex').write_text((d / 'main.tex').read_text().replace('End', r'\input{ok} End'))
    pdf, log = R.compile_latex(d, 'main.tex', timeout=60)
    txt = pdf_text(pdf)
    assert secret not in txt and 'NOLINK' in txt and 'INSIDEOK' in txt
    assert 'skipped symlink link.tex' in log


def test_endless_loop_times_out_and_falls_back(tmp_path, cache, launches):
    p = make_paper(tmp_path / 'loop', r'\def\x{\x}\x', text=r'Loop paper text. \def\x{\x}\x')
    r = R.render_paper(p, cache_dir=cache, timeout=5)
    tex = [(g, killed) for t, g, killed, _ in launches if t == 'pdflatex']
    own, fallback = tex[0], tex[1:]
    assert own[1] and own[0] <= 5 * (1 - R.FALLBACK_RESERVE), launches     # the loop was killed at its share of the deadline
    assert len(fallback) <= len(R.STRATEGIES)                              # a killed run is not rerun; one run per strategy at most
    assert_one_deadline(launches, 5)                                       # compile, fallback and rasterizing within the 5 s
    assert r.path in ('fallback', 'failed')
    assert any('timed out' in w for w in r.warnings), r.warnings
    if r.path == 'fallback': assert 'Loop paper text.' in pdf_text(r.pdf)


def test_failed_render_is_cached_and_retried_under_a_longer_deadline(tmp_path, cache, monkeypatch, launches):
    "issue #12: failures are cached with their reason; a deadline failure is retried only under a longer deadline."
    p = make_paper(tmp_path / 'loop', r'\def\x{\x}\x', text='Loop paper text.')
    r = R.render_paper(p, cache_dir=cache, timeout=4)
    assert (r.path, r.timed_out, r.timeout, r.pages, r.pdf) == ('failed', True, 4, [], None)
    # one deadline for compile + fallback, not one each: the one TeX run was killed at 3 s = 4 × (1 - FALLBACK_RESERVE),
    # which left the fallback under the 1 s it needs, so no fallback run was started (a fresh 4 s would have compiled it)
    assert [(t, killed) for t, _, killed, _ in launches] == [('pdflatex', True)] and launches[0][1] <= 4 * (1 - R.FALLBACK_RESERVE)
    assert 'real compile failed: timed out' in r.warnings and "render deadline passed before fallback strategy 'keep-math'" in r.warnings, r.warnings
    calls = []
    for name in ('compile_latex', 'compile_tex_string'):
        real = getattr(R, name)
        monkeypatch.setattr(R, name, lambda *a, _real=real, **k: (calls.append(1), _real(*a, **k))[1])
    assert R.render_paper(p, cache_dir=cache, timeout=4).to_dict() == r.to_dict() and calls == []
    assert R.render_paper(p, cache_dir=cache, timeout=3).path == 'failed' and calls == []
    launches.clear()
    r2 = R.render_paper(p, cache_dir=cache, timeout=12)              # 9 s for the own compile, 3 s for the fallback
    assert r2.path == 'fallback' and len(calls) >= 2 and 'Loop paper text.' in pdf_text(r2.pdf)
    assert (launches[0][0], launches[0][2]) == ('pdflatex', True) and launches[0][1] <= 12 * (1 - R.FALLBACK_RESERVE)
    assert_one_deadline(launches, 12)


def test_run_tool_measures_the_cpu_time_of_a_killed_tool():
    "A tool that loops has its CPU until it is killed; `sleep` has none, as a tool starved by a busy machine."
    import sys
    from docbench_nb.pages import assets as A
    with A.tool_timeouts() as killed:
        with pytest.raises(A.ToolTimeout, match='killed after 1.5s') as busy:
            A.run_tool([sys.executable, '-c', 'while True: pass'], timeout=1.5)
        with pytest.raises(A.ToolTimeout, match='killed after 1s') as idle: A.run_tool(['sleep', '30'], timeout=1)
    b, i = busy.value, idle.value
    assert b.wall_s >= 1.5 and b.cpu_s >= 0.5 * b.wall_s and not b.starved, (b.cpu_s, b.wall_s)
    assert i.wall_s >= 1 and i.cpu_s < 0.1 and i.starved, (i.cpu_s, i.wall_s)
    assert [(k.tool, k.cpu_s, k.wall_s) for k in killed] == [(Path(sys.executable).name, b.cpu_s, b.wall_s), ('sleep', i.cpu_s, i.wall_s)]


def _count_compiles(monkeypatch):
    "Calls of the paper's own compile, counted."
    calls, real = [], R.compile_latex
    monkeypatch.setattr(R, 'compile_latex', lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    return calls


def test_starved_own_compile_is_not_cached(tmp_path, cache, monkeypatch):
    """A deadline a busy machine caused (the killed TeX had no CPU) is not cached, failed or fallback: the next process
    compiles again. Within one process the result is reused, so two passes of one run (gold page maps, then page units)
    cannot see two different renders of one paper."""
    from docbench_nb.pages import assets
    monkeypatch.setattr(assets, '_cpu_seconds', lambda pgid: 0.0)      # what the CPU reader shows of a TeX starved by load
    monkeypatch.setattr(R, '_UNCACHED', {})
    p = make_paper(tmp_path / 'loop', r'\def\x{\x}\x', text='Loop paper text.')
    calls = _count_compiles(monkeypatch)
    first = None
    for n in (1, 1, 2):
        if first is not None and n == 2: R._UNCACHED.clear()              # what a new process starts with
        r = R.render_paper(p, cache_dir=cache, timeout=4)
        assert (r.path, r.timed_out, len(calls)) == ('failed', True, n), r.warnings
        w = r.warnings[-1]
        assert w.startswith('pdflatex killed after') and 'with 0.00 CPU s' in w, w
        assert w.endswith('not cached; it is tried again on the next run') and assets.uncached_reason(r.warnings) == w, w
        if first is None: first = r
        elif n == 1: assert r.to_dict() == first.to_dict() and r is not first     # the same answer, a copy
    monkeypatch.setattr(R, 'FALLBACK_RESERVE', 0.5)                    # 3 s of 6 for the own compile, 3 s for the fallback
    r = R.render_paper(p, cache_dir=cache, timeout=6)
    assert (r.path, r.timed_out, len(calls)) == ('fallback', True, 3) and r.warnings[-1].endswith('tried again on the next run')   # a longer deadline: tried again
    assert Path(r.pdf).name == f'uncached-{os.getpid()}.pdf' and 'Loop paper text.' in pdf_text(r.pdf)   # usable, not the cache's
    again = R.render_paper(p, cache_dir=cache, timeout=6)              # this process: the same answer, no compile
    assert again.to_dict() == r.to_dict() and len(calls) == 3
    Path(r.pdf).unlink()                                               # its file gone (a cleared cache): rendered again
    assert R.render_paper(p, cache_dir=cache, timeout=6).pdf == r.pdf and len(calls) == 4 and Path(r.pdf).exists()
    assert list(cache.rglob('result.json')) == []


def test_fallback_after_an_own_compile_timeout_is_retried_under_a_longer_deadline(tmp_path, cache, monkeypatch):
    "A fallback typeset after the own compile hit its deadline is `timed_out`: cached, and tried again under a longer deadline."
    from docbench_nb.pages import assets
    monkeypatch.setattr(assets, '_cpu_seconds', lambda pgid: 1e6)      # every kill CPU-bound, as a TeX loop is, whatever the load
    monkeypatch.setattr(R, 'FALLBACK_RESERVE', 0.5)
    p = make_paper(tmp_path / 'loop', r'\def\x{\x}\x', text='Loop paper text.')
    r = R.render_paper(p, cache_dir=cache, timeout=6)
    assert (r.path, r.timed_out, r.timeout) == ('fallback', True, 6) and 'real compile failed: timed out' in r.warnings, r.warnings
    assert Path(r.pdf).name == 'paper.pdf' and not any('not cached' in w for w in r.warnings)
    calls = _count_compiles(monkeypatch)
    assert R.render_paper(p, cache_dir=cache, timeout=6).to_dict() == r.to_dict() and calls == []
    assert R.render_paper(p, cache_dir=cache, timeout=5).to_dict() == r.to_dict() and calls == []
    r2 = R.render_paper(p, cache_dir=cache, timeout=7)
    assert (r2.path, r2.timed_out, r2.timeout, len(calls)) == ('fallback', True, 7, 1), r2.warnings
    old = {k: v for k, v in r.to_dict().items() if k != 'timed_out'}   # cached before `timed_out` covered fallbacks
    o = R.RenderResult.from_dict(old)
    assert (o.timed_out, R._retry(o, 6), R._retry(o, 7)) == (False, False, True)


@pytest.mark.skipif(not shutil.which('gs'), reason='needs ghostscript')
def test_convert_figure_caches_a_cpu_bound_timeout_but_not_a_starved_one(tmp_path, monkeypatch):
    from docbench_nb.pages import assets as A
    eps = tmp_path / 'loop.eps'
    eps.write_text('%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\n{ } loop\nshowpage\n')
    calls, real = [], A._render_eps
    monkeypatch.setattr(A, '_render_eps', lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    fails = lambda c: list((c / 'assets' / A.CONVERTER_VERSION).glob('*.fail.json'))
    c1, c2 = tmp_path / 'c1', tmp_path / 'c2'
    with monkeypatch.context() as m:
        m.setattr(A, '_cpu_seconds', lambda pgid: 0.0)                  # ghostscript starved by load: says nothing of the file
        for n in (1, 2):
            with pytest.raises(A.AssetError, match='not cached; it is tried again on the next run'):
                A.convert_figure(eps, cache_dir=c1, timeout=1)
            assert len(calls) == n and fails(c1) == []
    calls.clear()
    with pytest.raises(A.AssetError, match='killed after 1.5s') as e: A.convert_figure(eps, cache_dir=c2, timeout=1.5)
    assert 'not cached' not in str(e.value)                             # the real reader: the loop had its CPU
    with pytest.raises(A.AssetError, match='cached failure'): A.convert_figure(eps, cache_dir=c2, timeout=1.5)
    assert len(calls) == 1 and len(fails(c2)) == 1


def test_tex_output_flood_keeps_python_memory_bounded(tmp_path):
    "issue #12: `\\loop\\message{...}\\repeat` drove the Python process to 4.35 GB through communicate()."
    import sys, json as _json
    d = tmp_path / 'flood'; d.mkdir()
    (d / 'main.tex').write_text('\\documentclass{article}\n\\begin{document}\n'
                                '\\loop\\message{xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx}\\iftrue\\repeat\n\\end{document}\n')
    code = ("import json, resource, sys\nfrom docbench_nb.pages.sandbox import compile_latex\n"
            "r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "pdf, log = compile_latex(sys.argv[1], 'main.tex', timeout=8)\n"
            "print(json.dumps([r0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, pdf, len(log), log[-200:]]))")
    out = subprocess.run([sys.executable, '-c', code, str(d)], capture_output=True, timeout=120, text=True)
    r0, r1, pdf, n_log, tail = _json.loads(out.stdout.strip().splitlines()[-1])
    assert pdf is None and 'TIMEOUT' in tail, tail
    assert (r1 - r0) / 1024 < 60, f'peak RSS grew by {(r1 - r0) / 1024:.0f} MB'       # before: ~0.5 GB a second
    assert n_log < 4.1 * 1024**2                                   # the log read back is bounded too


def test_fatal_error_leaves_no_pdf_but_ordinary_errors_do(tmp_path):
    d = make_paper(tmp_path / 'e', r'Before \undefinedmacro after $x^$ end.').root
    pdf, log = R.compile_latex(d, 'main.tex', timeout=60)
    assert pdf and 'Before' in pdf_text(pdf) and len(R.tex_errors(log)) >= 1
    d2 = make_paper(tmp_path / 'f', 'x', preamble=r'\usepackage{no-such-package-xyz}').root
    pdf2, log2 = R.compile_latex(d2, 'main.tex', timeout=60)
    assert pdf2 is None and "no-such-package-xyz.sty' not found" in log2


def test_compile_latex_rejects_bad_arguments(tmp_path):
    d = make_paper(tmp_path / 'g', 'x').root
    with pytest.raises(R.RenderError): R.compile_latex(d, '../outside.tex')
    with pytest.raises(ValueError): R.compile_latex(d, 'main.tex', engine='sh')


# ---------------------------------------------------------------- pages
@pytest.mark.parametrize('mp', [600_000, 1_000_000, 2_000_000])
def test_render_pages_respects_budget(tmp_path, cache, mp):
    d = make_paper(tmp_path / 'pp', r'One.\newpage Two.\newpage Three.').root
    pdf, _ = R.compile_latex(d, 'main.tex', timeout=60)
    pages = R.render_pages(pdf, max_pixels=mp, cache_dir=cache)
    assert len(pages) == 3
    (w_pt, h_pt), = set(R.pdf_page_sizes(pdf, 1, 3))
    for p in pages:
        with Image.open(p) as im:
            assert im.mode == 'RGB' and 0.97 * mp <= im.width * im.height <= mp
            assert abs(im.width / im.height - w_pt / h_pt) < 0.01         # the page's aspect (A4 or letter)
    assert [Path(p).name for p in R.render_pages(pdf, max_pixels=mp, first=2, last=3, cache_dir=cache)] == ['page-0002.png', 'page-0003.png']


def test_mixed_page_sizes_all_within_budget(tmp_path, cache):
    d = make_paper(tmp_path / 'mx', r'Small page.\newpage\pdfpagewidth=30in \pdfpageheight=20in Huge page.').root
    pdf, _ = R.compile_latex(d, 'main.tex', timeout=60)
    for p in R.render_pages(pdf, max_pixels=300_000, cache_dir=cache):
        with Image.open(p) as im: assert im.width * im.height <= 300_000


def test_render_paper_is_cached_by_tree_content(tmp_path, cache):
    p = make_paper(tmp_path / 'c', 'Cached paper.')
    r1 = R.render_paper(p, cache_dir=cache)
    r2 = R.render_paper(p, cache_dir=cache)
    assert r1 == r2 and r1.path == 'compiled'
    (Path(p.root) / 'main.tex').write_text((Path(p.root) / 'main.tex').read_text().replace('Cached', 'Changed'))
    r3 = R.render_paper(p, cache_dir=cache)
    assert r3.pdf != r1.pdf and 'Changed paper.' in pdf_text(r3.pdf)


def test_missing_class_falls_back_to_text(tmp_path, cache):
    p = make_paper(tmp_path / 'chem', 'Body.', cls='docbenchabsentclass',
                   text=r'\section{Results} The free energy $\Delta G = -RT\ln K$ is negative \cite{x}.')
    assert R.render_paper(p, cache_dir=cache).path == 'repaired'                # by default the class is substituted
    r = R.render_paper(p, cache_dir=cache, max_repairs=0)                         # without repairs: the text fallback
    assert r.path == 'fallback' and r.pages and r.repairs == []
    assert 'docbenchabsentclass.cls' in r.warnings[0] and 'docbenchabsentclass' in r.log_tail
    txt = pdf_text(r.pdf)
    assert 'Results' in txt and 'The free energy' in txt and 'is negative' in txt


def test_paper_without_source_uses_fallback(cache):
    r = R.render_paper(Paper(id='nosrc', text='Only text here.'), cache_dir=cache)
    assert r.path == 'fallback' and 'Only text here.' in pdf_text(r.pdf)


# ---------------------------------------------------------------- preamble repairs
def test_missing_files_reads_latex_pdftex_and_tex_messages():
    log = ("! LaTeX Error: File `showyourwork.sty' not found.\n./ms.tex:2: LaTeX Error: File `aastex62.cls' not found.\n"
           "./ms.tex:9: Package pdftex.def Error: File `fig/a.pdf' not found: using draft setting.\n! I can't find file `sec/intro'.\n"
           "! LaTeX Error: File `showyourwork.sty' not found.\n")
    assert R.missing_files(log) == ['showyourwork.sty', 'aastex62.cls', 'fig/a.pdf', 'sec/intro']
    assert R.missing_files('no problems here') == [] and R.missing_files(None) == []


@pytest.mark.parametrize('line, want', [
    (r'\usepackage{gone}', ''),
    (r'\usepackage[opt=1]{gone}', ''),
    (r'\RequirePackage{gone}[2020/01/01]', ''),
    (r'\usepackage{amsmath,gone}', r'\usepackage{amsmath}'),
    (r'\usepackage[T1]{ fontenc , gone }', r'\usepackage[T1]{fontenc}'),
    ('\\usepackage[colorlinks,\n  linkcolor={red}]{gone,%note\n hyperref}[2021/01/01]', '\\usepackage[colorlinks,\n  linkcolor={red}]{hyperref}[2021/01/01]'),
    ('\\usepackage % spaced\n  {gone}', ''),
    (r'\usepackage{gonetoo,gone.sty}', r'\usepackage{gonetoo}'),
])
def test_repair_removes_only_the_missing_package(line, want):
    tex = f'\\documentclass{{article}}\n{line}\n\\begin{{document}}x\\end{{document}}\n'
    out, notes = R.repair_preamble(tex, {'gone.sty'})
    head = out[:out.index('%% docbench')]
    assert head == f'\\documentclass{{article}}\n{want}\n', head
    assert len(notes) == 1 and notes[0].startswith('removed package gone')
    assert out.rstrip().endswith('\\begin{document}x\\end{document}')


def test_repair_leaves_comments_and_unrelated_text_alone():
    tex = '\\documentclass{article}\n% \\usepackage{gone}\n\\usepackage{gonex} \\newcommand\\gone{x}\n\\begin{document}\\usepackage{gone}\\end{document}'
    assert R.repair_preamble(tex, {'gone'}) == (tex, ['gone is not loaded by this file (another package or class asks for it): left as is'])
    assert R.repair_preamble(tex, set()) == (tex, [])


def test_repair_substitutes_article_for_a_missing_class():
    tex = ('%\\documentclass{old}\n\\documentclass[twocolumn, 11pt, linenumbers,\n  a4paper]{sn-jnl}\n\\usepackage{biblatex}\n'
           '\\begin{document}x\\end{document}')
    out, notes = R.repair_preamble(tex, set(), 'sn-jnl.cls')
    assert out.startswith('%\\documentclass{old}\n\\documentclass[twocolumn,11pt,a4paper]{article}\n')
    assert 'RequirePackage{natbib}' not in out and 'RequirePackage{graphicx}' in out      # biblatex rules natbib out
    assert out.index(R.CLASS_SHIM) < out.index(R.FRONT_MATTER_SHIM) < out.index('\\usepackage{biblatex}') < out.index(R.BODY_SHIM)
    assert notes == ['replaced class sn-jnl (sn-jnl.cls not found) by article[twocolumn,11pt,a4paper], dropped options linenumbers; '
                     'loaded graphicx,amssymb,url as journal classes do; added stand-ins for front-matter macros']
    assert R.repair_preamble(tex, set(), 'other.cls')[0] == tex


def _odd_paper(d, body='Body text of the odd paper.', preamble=''):
    d = Path(d); d.mkdir(parents=True, exist_ok=True)
    (d / 'ms.tex').write_text('\\documentclass[twocolumn,modern]{docbenchjournal}\n\\usepackage{amsmath, docbenchgone}\n' + preamble +
                              '\n\\shorttitle{Short}\n\\begin{document}\n\\title{Odd Title}\n\\author[0000-0001]{Ann Author}\n'
                              '\\affiliation{Dept. of Examples}\n\\email{ann@example.org}\n\\begin{abstract}Abstract words.\\end{abstract}\n'
                              '\\keywords{repairs}\n\\section{Intro}' + body + '\n\\end{document}\n')
    return Paper(id='odd', title='Odd Title', root=str(d), main_file='ms.tex', text=body)


def test_repaired_paper_renders_its_own_latex(tmp_path, cache):
    p = _odd_paper(tmp_path / 'odd')
    before = (tmp_path / 'odd' / 'ms.tex').read_bytes()
    r = R.render_paper(p, cache_dir=cache)
    assert r.path == 'repaired' and r.pages and r.path in R.OWN_LATEX_PATHS
    assert len(r.repairs) == 2 and 'docbenchjournal' in r.repairs[0] and 'docbenchgone' in r.repairs[1], r.repairs
    assert r.warnings[0].startswith("real compile failed: ! LaTeX Error: File `docbenchjournal.cls' not found")
    txt = pdf_text(r.pdf)
    for w in ('Odd Title', 'Ann Author', 'Dept. of Examples', 'Abstract words.', 'Keywords: repairs', 'Body text of the odd paper.'):
        assert w in txt, (w, txt)
    assert txt.index('Odd Title') < txt.index('Abstract words.')          # the title block comes first, as in the journal class
    assert 'ann@example.org' not in txt and 'Short' not in txt
    assert (tmp_path / 'odd' / 'ms.tex').read_bytes() == before and sorted(os.listdir(tmp_path / 'odd')) == ['ms.tex']
    again = R.render_paper(p, cache_dir=cache)
    assert again == r                                                     # cached, repairs included
    assert R.render_paper(p, cache_dir=cache, max_repairs=1).path == 'fallback'     # two rounds are needed


def test_repair_in_an_input_preamble_file(tmp_path, cache):
    d = tmp_path / 'inp'; d.mkdir()
    (d / 'main.tex').write_text('\\documentclass{article}\n\\input{preamble}\n\\begin{document}\nInput preamble paper. \\mathds{R}\n\\end{document}\n')
    (d / 'preamble.tex').write_text('\\usepackage{amssymb}\n\\usepackage{dsfont}% double-struck\n')
    r = R.render_paper(Paper(id='inp', root=str(d), main_file='main.tex', text='Input preamble paper.'), cache_dir=cache)
    if R.missing_files(r.log_tail) == [] and r.path == 'compiled': pytest.skip('dsfont is installed here')
    assert r.path == 'repaired' and any('flattened' in x for x in r.repairs) and any('dsfont' in x for x in r.repairs), r.repairs
    assert 'Input preamble paper.' in pdf_text(r.pdf) and (d / 'preamble.tex').read_text().startswith('\\usepackage{amssymb}')


def test_repair_stops_when_another_package_needs_the_missing_one(tmp_path, cache):
    d = tmp_path / 'wrap'
    p = make_paper(d, 'Wrapped paper.', preamble='\\usepackage{docbenchwrapper}', text='Wrapped paper.')
    (d / 'docbenchwrapper.sty').write_text('\\ProvidesPackage{docbenchwrapper}\n\\RequirePackage{docbenchgone}\n')
    r = R.render_paper(p, cache_dir=cache)
    assert r.path == 'fallback' and r.repairs == []
    stop = [w for w in r.warnings if w.startswith('repair stopped')]
    assert stop and 'docbenchgone.sty is loaded by another package or class' in stop[0], r.warnings


@pytest.mark.parametrize('fatal', [False, True])
def test_repaired_compile_keeps_the_sandbox(tmp_path, cache, fatal):
    "A paper that needs repairs and attacks: non-fatal attacks still give 'repaired', fatal ones the fallback; nothing leaks either way."
    marker = Path('/tmp') / f'pwned_{uuid.uuid4().hex}'
    d = tmp_path / 'deep' / 'evil'
    body = (f'Visible start. \\immediate\\write18{{touch {marker}}} \\IfFileExists{{/etc/passwd}}{{\\input{{/etc/passwd}}}}{{NOPASSWD}} '
            r'\openin5=/etc/passwd \ifeof5 CLOSED\else OPENED\fi\ '
            + (r'\input{/etc/passwd} \immediate\openout3=../escaped.tex \immediate\write3{x}\immediate\closeout3 ' if fatal else '')
            + 'Visible end.')
    p = _odd_paper(d, body=body, preamble=r'\usepackage{/etc/passwd}')
    r = R.render_paper(p, cache_dir=cache, timeout=60)
    assert r.path == ('fallback' if fatal else 'repaired'), (r.warnings, r.log_tail[-800:])
    if fatal: assert any(w.startswith('repair stopped: the compile failed for another reason') and "can't write on file" in w
                         for w in r.warnings), r.warnings
    else:
        assert any('/etc/passwd' in x for x in r.repairs), r.repairs          # \usepackage{/etc/passwd} was refused, then dropped
        txt = pdf_text(r.pdf)
        assert 'Visible start.' in txt and 'Visible end.' in txt and 'NOPASSWD' in txt and 'CLOSED' in txt
    txt = pdf_text(r.pdf)
    for secret in _secret_lines(): assert secret not in txt
    assert not marker.exists() and not (d.parent / 'escaped.tex').exists()
    assert sorted(os.listdir(d)) == ['ms.tex'] and 'docbenchjournal' in (d / 'ms.tex').read_text()


def test_missing_input_file_is_dropped(tmp_path, cache):
    d = tmp_path / 'gen'; (d / 'sec').mkdir(parents=True)
    (d / 'main.tex').write_text('\\documentclass{article}\n\\begin{document}\nMain text.\n\\input{sec/body}\n% \\input{output/x}\n\\end{document}\n')
    (d / 'sec' / 'body.tex').write_text('Section text. \\input{output/generated.tex} After table.\n')
    r = R.render_paper(Paper(id='gen', root=str(d), main_file='main.tex', text='Main text.'), cache_dir=cache)
    assert r.path == 'repaired', r.warnings
    assert r.repairs == ["inlined the main file's \\input files (flattened) to patch them",
                         'dropped \\input of output/generated.tex (not in the source)'], r.repairs
    assert 'Main text.' in pdf_text(r.pdf) and 'After table.' in pdf_text(r.pdf)
    assert R._drop_inputs('a \\input{x} b %\\input{x}\n\\input x.tex c \\inputx', ['x.tex']) == \
        ('a  b %\\input{x}\n c \\inputx', ['dropped \\input of x.tex (not in the source)'], [])


def test_main_text_replaces_the_main_file_only_in_the_copy(tmp_path):
    d = make_paper(tmp_path / 'mt', 'Original text.').root
    pdf, log = R.compile_latex(d, 'main.tex', timeout=60, main_text='\\documentclass{article}\\begin{document}Patched text.\\end{document}')
    assert 'Patched text.' in pdf_text(pdf) and 'Original text.' in (Path(d) / 'main.tex').read_text()


# ---------------------------------------------------------------- minimal_document
HOSTILE = [
    r'\begin{itemize}\item a \item[b] c', r'$x^{2$ and } } } {{{', r'\end{document} after', r'\[ \frac{1}{ \]',
    r'\begin{align} a &= b \\ c &= d \end{align} \begin{eqnarray} x &=& y \end{eqnarray}', r'50% & # _ ^ ~ < > |',
    r'$\left( \frac{a}{b} \right.$ $\left( x$ $\right)$ $\middle|$', r'\verb|a$b| \verb+x%y+', '\x00\x07 control chars',
    r'\begin{verbatim}' + '\n$%&\\weird\n' + r'\end{verbatim}', r'$\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}$ $a & b \\ c$',
    r'$$\begin{cases} x \\ y \end{cases$$', r'\newcommand{\foo}[2]{#1#2}\foo{a}{b} \def\bar#1{#1} \let\a=\b',
    'Unicode: αβγ ≤ ≥ → ∞ ∑ ℝ “quotes” — dashes… naïve Ångström 中文 emoji 🙂 ﬁ', r'\section{A $x$ \\ title \footnote{n}}',
    r'\begin{tabular}{|c|c|} a & b \\ \hline c & d \end{tabular}', r'$\mathbb{R}^{n}\xrightarrow{f}\operatorname{Tr}(A)$',
    r'\begin{equation} \begin{split} a &= b \\ &= c \end{split} \end{equation}', r'$\hat\eps + \frac\eps 2 + \vect{x}$',
    '^^M ^^00 ^^ff', r'\begin{tikzpicture}\draw (0,0) -- (1,1);\end{tikzpicture}', r'$\text{if $x$ then \$5}$',
    r'\csname relax\endcsname \expandafter\x \catcode`\$=12 \makeatletter\@tempa', '\\', '{', '$', r'\begin{',
]


@pytest.mark.parametrize('i', range(len(HOSTILE)))
def test_minimal_document_compiles_hostile_text(i):
    doc = R.minimal_document('Start marker. ' + HOSTILE[i] + ' End marker.', title='T $x$')
    pdf, log = R.compile_tex_string(doc, timeout=60)
    assert pdf, (HOSTILE[i], R.tex_errors(log)[:3])
    assert 'Start marker.' in pdf_text(pdf)


def test_minimal_document_all_hostile_together_and_strategies():
    text = '\n\n'.join(HOSTILE)
    for st in R.STRATEGIES:
        pdf, log = R.compile_tex_string(R.minimal_document(text, strategy=st), timeout=60)
        assert pdf, (st, R.tex_errors(log)[:3])


def test_minimal_document_keeps_math_and_structure():
    doc = R.minimal_document(r'\section{Intro} We find $\alpha \le \beta$ and \begin{equation}\label{e} E = mc^2 \end{equation} \cite{k}.')
    assert r'\section*{Intro}' in doc and r'$\alpha \le \beta $' in doc and 'E = mc^2' in doc
    assert 'label' not in doc.split(r'\begin{document}')[1] and 'cite' not in doc.split(r'\begin{document}')[1]
    pdf, _ = R.compile_tex_string(doc)
    t = pdf_text(pdf)
    assert 'Intro' in t and 'We find' in t and 'α' in t


def test_math_whitelist_is_defined_in_the_template():
    assert R.undefined_in_template(R.MATH_COMMANDS | MIN._TEXT_SYMBOLS | MIN._TEXT_STYLES) == []


# ---------------------------------------------------------------- snippets
WORDS = ('Dense retrievers embed each chunk of a scientific paper; the paper score is the maximum over its chunks, '
         'so long documents are neither favoured nor penalised by length alone. ')


def test_snippet_short_text_keeps_base_size(tmp_path):
    png, info = R.render_snippet(WORDS * 3, max_pixels=500_000, cache_dir=tmp_path, with_info=True)
    assert info['font_size'] == 10.0 and info['fits']
    with Image.open(png) as im: assert im.width * im.height <= 500_000


def test_snippet_long_text_shrinks_to_one_page(tmp_path):
    n_words = len((WORDS * 120).split())
    png, info = R.render_snippet(WORDS * 120, max_pixels=1_000_000, cache_dir=tmp_path, with_info=True)
    assert info['fits'] and info['pages_at_size'] == 1 and 2.0 <= info['font_size'] < 7
    pdf, _ = R.compile_tex_string(R.minimal_document(WORDS * 120, font_size=info['font_size'], snippet=True))
    assert R.pdf_page_count(pdf) == 1 and len(pdf_text(pdf).split()) >= 0.95 * n_words   # all the text is on that page
    pdf2, _ = R.compile_tex_string(R.minimal_document(WORDS * 120, font_size=info['font_size'] + 0.5, snippet=True))
    assert R.pdf_page_count(pdf2) > 1                                               # and the size is (nearly) the largest that fits
    assert R.render_snippet(WORDS * 120, max_pixels=1_000_000, cache_dir=tmp_path) == png


def test_snippet_that_cannot_fit_warns(tmp_path):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        png, info = R.render_snippet(WORDS * 400, cache_dir=tmp_path, min_size=6.0, with_info=True)
    assert not info['fits'] and info['font_size'] == 6.0 and any('does not fit' in str(x.message) for x in w)


# ---------------------------------------------------------------- shared corpus
def _paper(src):
    return R._as_paper(str(src))


def _required_files(d):
    "Class and package files a paper's .tex files ask for (comments stripped)."
    req = set()
    for p in d.rglob('*.tex'):
        t = re.sub(r'(?<!\\)%.*', '', p.read_text(errors='replace'))
        req.update(m.group(1).strip() + '.cls' for m in re.finditer(r'\\documentclass\s*(?:\[[^\]]*\])?\s*\{([^}]+)\}', t))
        for m in re.finditer(r'\\(?:usepackage|RequirePackage)\s*(?:\[[^\]]*\])?\s*\{([^}]+)\}', t):
            req.update(x.strip() + '.sty' for x in m.group(1).split(',') if x.strip())
    return req


def _installed(name, d, _memo={}):
    if any(d.rglob(name)): return True
    if name not in _memo:
        _memo[name] = bool(subprocess.run(['kpsewhich', name], capture_output=True, timeout=30).stdout.strip())
    return _memo[name]


@pytest.mark.slow
def test_real_papers_compile_when_their_packages_exist_and_fall_back_otherwise(shared_papers, tmp_path):
    "Real shared papers whose classes/packages are all installed compile for real; one needing achemso/showyourwork falls back."
    ready = [d for d in shared_papers if all(_installed(f, d) for f in _required_files(d))]
    if not ready: pytest.skip('no shared paper has all its packages on this TeX installation')
    for d in ready[:3]:
        r = R.render_paper(_paper(d), max_pixels=600_000, cache_dir=tmp_path, timeout=180)
        assert r.path == 'compiled' and len(r.pages) >= 1, (d.name, r.warnings, r.log_tail[-500:])
        assert R.pdf_page_count(r.pdf) == len(r.pages)
    odd = [d for d in shared_papers if any(f in ('achemso.cls', 'showyourwork.sty') and not _installed(f, d)
                                           for f in _required_files(d))]
    assert odd, 'no paper needing an absent achemso.cls / showyourwork.sty in the shared corpus'
    paper = _paper(odd[0])
    r = R.render_paper(paper, max_pixels=600_000, cache_dir=tmp_path, timeout=180, max_repairs=0)   # the text fallback
    assert r.path == 'fallback' and r.pages and r.warnings[0].startswith('real compile failed'), (odd[0].name, r.warnings)
    words = re.findall(r'\b[A-Za-z]{7,}\b', re.sub(r'\\[A-Za-z]+', ' ', paper.text[:6000]))[:40]
    txt = pdf_text(r.pdf)
    assert words and sum(w in txt for w in words) >= 0.6 * len(words)           # the fallback carries the paper's words


def test_main_file_in_subfolder_resolves_root_and_main_relative_inputs(tmp_path):
    (tmp_path / 'paper' / 'local').mkdir(parents=True); (tmp_path / 'sections').mkdir()
    (tmp_path / 'sections' / 'intro.tex').write_text('ROOTRELATIVE')
    (tmp_path / 'paper' / 'local' / 'a.tex').write_text('MAINRELATIVE')
    (tmp_path / 'paper' / 'main.tex').write_text('\\documentclass{article}\\begin{document}\\input{sections/intro} '
                                                 '\\input{local/a}\\end{document}')
    pdf, log = R.compile_latex(tmp_path, 'paper/main.tex', out_dir=tmp_path / 'out', timeout=60)
    assert Path(pdf).parent == tmp_path / 'out'
    assert 'ROOTRELATIVE MAINRELATIVE' in pdf_text(pdf)


@pytest.mark.slow
def test_shared_showyourwork_paper_is_repaired_and_compiled_papers_stay_compiled(shared_papers, tmp_path):
    "A showyourwork paper (showyourwork.sty is not in TeX Live) renders its own LaTeX once repaired; a paper that compiled still does."
    by_id = {d.name: d for d in shared_papers}
    syw = next((by_id[x] for x in ('dong-obliquity', 'farr-howmanysamples') if x in by_id), None)
    if syw is None: pytest.skip('the known showyourwork papers are not in this shared corpus')
    if _installed('showyourwork.sty', syw): pytest.skip('showyourwork.sty is installed: nothing to repair')
    r = R.render_paper(_paper(syw), max_pixels=300_000, cache_dir=tmp_path, timeout=180, max_pages=2)
    assert r.path == 'repaired' and r.pages, (syw.name, r.warnings)
    assert any('showyourwork' in x for x in r.repairs) and "showyourwork.sty' not found" in r.warnings[0]
    assert R.pdf_page_count(r.pdf) >= 2
    ready = [d for d in shared_papers if all(_installed(f, d) for f in _required_files(d))]
    if not ready: pytest.skip('no shared paper has all its packages on this TeX installation')
    r2 = R.render_paper(_paper(ready[0]), max_pixels=300_000, cache_dir=tmp_path, timeout=180, max_pages=1)
    assert r2.path == 'compiled' and r2.repairs == [], (ready[0].name, r2.warnings)


@pytest.mark.slow
def test_ten_thousand_pages_one_deadline_and_a_page_cap(tmp_path, cache, launches):
    "issue #12: a 10,000-page document rasterized all its pages in 198 s under timeout=120."
    body = r'\newcount\i \loop\advance\i 1 Page \the\i.\newpage\ifnum\i<10000 \repeat'
    p = make_paper(tmp_path / 'long', body, text='Page.')
    pdf, _ = R.compile_latex(p.root, 'main.tex', timeout=300)
    assert R.pdf_page_count(pdf) == 10_000
    launches.clear()                                               # no cap: the deadline stops it
    with pytest.raises(R.AssetError, match='deadline'): R.render_pages(pdf, max_pixels=1_000_000, timeout=10, cache_dir=cache)
    done = rasterized(launches)
    assert len(done) < 10_000 / R.PAGES_PER_CALL and (not done or done[-1][1] < 10_000), done   # stopped before the last chunk
    assert_one_deadline(launches, 10)                              # every chunk drew on the one 10 s deadline
    launches.clear()
    r = R.render_paper(p, max_pixels=50_000, cache_dir=cache, timeout=240)
    assert (r.path, len(r.pages), r.n_pages_pdf, r.max_pages) == ('compiled', R.DEFAULT_MAX_PAGES, 10_000, R.DEFAULT_MAX_PAGES)
    assert f'rendered the first {R.DEFAULT_MAX_PAGES} of 10000 pages (max_pages={R.DEFAULT_MAX_PAGES})' in r.warnings
    chunks = rasterized(launches)                                  # the cap: pages 1-300 went to pdftoppm, not 10,000
    assert chunks == [(a, min(a + R.PAGES_PER_CALL - 1, R.DEFAULT_MAX_PAGES)) for a in range(1, R.DEFAULT_MAX_PAGES + 1, R.PAGES_PER_CALL)]
    assert_one_deadline(launches, 240)
