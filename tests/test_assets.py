"Figure conversion: every format, the pixel budget, aspect ratio, broken files, bombs, and the shared corpus."
import shutil, struct, zlib, math
from pathlib import Path
import pytest
from PIL import Image
from docbench_nb.pages.assets import (AssetError, fit_max_pixels, convert_figure, convert_paper_figures, sniff_format,
                                run_tool, ToolTimeout)
from docbench_nb.records import Paper, Figure

needs_pdftoppm = pytest.mark.skipif(not shutil.which('pdftoppm'), reason='poppler-utils not installed')
needs_gs = pytest.mark.skipif(not shutil.which('gs'), reason='ghostscript not installed')


def _plot(path, size=(4, 3)):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=size)
    ax.plot([0, 1, 2], [2, 0, 1], 'r-'); ax.set_title('fixture')
    fig.savefig(path); plt.close(fig)
    return path


@pytest.fixture
def cache(tmp_path): return tmp_path / 'cache'


def _png_bomb(path, w=100_000, h=100_000):
    chunk = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    Path(path).write_bytes(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 1, 0, 0, 0, 0))
                           + chunk(b'IDAT', zlib.compress(b'\0' * 4096)) + chunk(b'IEND', b''))
    return path


def _size(p):
    with Image.open(p) as im: return im.size, im.mode


@pytest.mark.parametrize('w,h,mp', [(4000, 3000, 1_000_000), (1000, 10, 5_000), (3, 7000, 2_000), (640, 480, 10**6)])
def test_fit_max_pixels_budget_and_aspect(w, h, mp):
    w2, h2 = fit_max_pixels(w, h, mp)
    assert w2 * h2 <= mp and w2 <= w and h2 <= h
    if w * h <= mp: assert (w2, h2) == (w, h)
    elif min(w2, h2) > 1:
        assert abs(w2 / h2 - w / h) <= (w / h) * (1 / min(w2, h2) + 1e-9) + 1e-9   # within one pixel of rounding
        assert w2 * h2 >= mp * (1 - 2 / min(w2, h2)) - 1


@pytest.mark.parametrize('fmt,ext,mode', [('PNG', 'png', 'RGBA'), ('JPEG', 'jpg', 'RGB'), ('GIF', 'gif', 'P'),
                                          ('TIFF', 'tif', 'RGB'), ('BMP', 'bmp', 'RGB'), ('WEBP', 'webp', 'RGB')])
def test_raster_formats_shrink_to_budget_keeping_aspect(tmp_path, cache, fmt, ext, mode):
    src = tmp_path / f'big.{ext}'
    im = Image.new(mode, (2400, 1200), 3 if mode == 'P' else (20, 200, 40, 255)[:len(mode)])
    im.save(src, fmt)
    out = convert_figure(src, max_pixels=500_000, cache_dir=cache)
    (w, h), m = _size(out)
    assert m == 'RGB' and w * h <= 500_000 and w * h > 0.98 * 500_000
    assert abs(w / h - 2.0) < 0.01
    assert sniff_format(src) == {'jpg': 'jpeg', 'tif': 'tiff'}.get(ext, ext)


def test_small_raster_is_not_upscaled_and_alpha_is_white(tmp_path, cache):
    src = tmp_path / 'icon.png'
    im = Image.new('RGBA', (40, 20), (0, 0, 0, 0)); im.paste((0, 0, 255, 255), (0, 0, 20, 20)); im.save(src)
    out = convert_figure(src, max_pixels=1_000_000, cache_dir=cache)
    with Image.open(out) as o:
        assert o.size == (40, 20) and o.mode == 'RGB'
        assert o.getpixel((5, 5)) == (0, 0, 255) and o.getpixel((35, 5)) == (255, 255, 255)


def test_gif_first_frame_and_16bit_tiff(tmp_path, cache):
    frames = [Image.new('RGB', (30, 30), c) for c in ((255, 0, 0), (0, 255, 0))]
    frames[0].save(tmp_path / 'a.gif', save_all=True, append_images=frames[1:])
    with Image.open(convert_figure(tmp_path / 'a.gif', cache_dir=cache)) as o: assert o.getpixel((1, 1)) == (255, 0, 0)
    Image.new('I;16', (50, 20), 1000).save(tmp_path / 'deep.tif')
    with Image.open(convert_figure(tmp_path / 'deep.tif', cache_dir=cache)) as o: assert o.mode == 'RGB' and o.size == (50, 20)


@needs_pdftoppm
@pytest.mark.parametrize('mp', [600_000, 1_000_000, 2_000_000])
def test_pdf_rendered_at_budget(tmp_path, cache, mp):
    src = _plot(tmp_path / 'plot.pdf', size=(6, 3))
    (w, h), m = _size(convert_figure(src, max_pixels=mp, cache_dir=cache))
    assert m == 'RGB' and 0.97 * mp <= w * h <= mp and abs(w / h - 2.0) < 0.01


@needs_gs
@pytest.mark.parametrize('ext', ['eps', 'ps'])
def test_eps_and_ps_via_ghostscript(tmp_path, cache, ext):
    src = _plot(tmp_path / f'plot.{ext}', size=(4, 4))
    (w, h), m = _size(convert_figure(src, max_pixels=400_000, cache_dir=cache))
    assert m == 'RGB' and w * h <= 400_000 and w * h > 0.5 * 400_000
    if ext == 'eps': assert abs(w / h - 1.0) < 0.02      # EPSCrop: the bounding box, not a letter page
    with Image.open(convert_figure(src, max_pixels=400_000, cache_dir=cache)) as im:
        assert im.convert('L').getextrema()[0] < 128     # something was drawn


def test_format_by_content_not_name(tmp_path, cache):
    Image.new('RGB', (10, 10), 'red').save(tmp_path / 'x.png')
    liar = tmp_path / 'figure.pdf'; liar.write_bytes((tmp_path / 'x.png').read_bytes())
    with Image.open(convert_figure(liar, cache_dir=cache)) as o: assert o.getpixel((0, 0)) == (255, 0, 0)


def test_cache_is_content_addressed_and_atomic(tmp_path, cache):
    Image.new('RGB', (10, 10), 'red').save(tmp_path / 'a.png')
    shutil.copy(tmp_path / 'a.png', tmp_path / 'copy.png')
    a = convert_figure(tmp_path / 'a.png', max_pixels=50, cache_dir=cache)
    assert convert_figure(tmp_path / 'copy.png', max_pixels=50, cache_dir=cache) == a
    assert convert_figure(tmp_path / 'a.png', max_pixels=60, cache_dir=cache) != a
    assert not [p for p in Path(a).parent.iterdir() if p.name.startswith('.tmp')]


@pytest.mark.parametrize('name,content,msg', [
    ('cut.png', None, 'truncated'), ('notes.jpg', b'plain text, not a jpeg', 'cannot identify'),
    ('d.svg', b'<svg xmlns="http://www.w3.org/2000/svg"/>', 'unsupported format svg'),
    ('blob.xyz', b'\x00\x01\x02', 'unrecognised'), ('broken.pdf', b'%PDF-1.4\ngarbage\n', 'pdf')])
def test_bad_files_raise_asset_error_naming_file(tmp_path, cache, name, content, msg):
    p = tmp_path / name
    if content is None:
        Image.new('RGB', (300, 300)).save(tmp_path / 'full.png'); content = (tmp_path / 'full.png').read_bytes()[:120]
    p.write_bytes(content)
    if name.endswith('.pdf') and not shutil.which('pdftoppm'): pytest.skip('poppler-utils not installed')
    with pytest.raises(AssetError) as e: convert_figure(p, cache_dir=cache)
    assert name in str(e.value) and msg in str(e.value)


def test_decompression_bomb_is_refused_before_decoding(tmp_path, cache):
    with pytest.raises(AssetError, match='decompression bomb'): convert_figure(_png_bomb(tmp_path / 'bomb.png'), cache_dir=cache)
    lim = Image.MAX_IMAGE_PIXELS
    try:                                                          # the guard follows Image.MAX_IMAGE_PIXELS...
        Image.MAX_IMAGE_PIXELS = 1_000_000
        with pytest.raises(AssetError, match='decompression bomb'):
            convert_figure(_png_bomb(tmp_path / 'b2.png', 2_000, 1_500), cache_dir=cache)
        Image.MAX_IMAGE_PIXELS = None                             # ...and stays on when a caller disables Pillow's
        with pytest.raises(AssetError, match='decompression bomb'): convert_figure(tmp_path / 'bomb.png', cache_dir=cache)
    finally: Image.MAX_IMAGE_PIXELS = lim


@needs_gs
def test_endless_postscript_is_killed(tmp_path, cache):
    p = tmp_path / 'loop.eps'
    p.write_bytes(b'%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\n{ } loop\n')
    with pytest.raises(AssetError, match='killed after'): convert_figure(p, cache_dir=cache, timeout=2)


@needs_gs
def test_looping_eps_failure_is_cached(tmp_path, cache, monkeypatch):
    "issue #12: a looping EPS cost its full timeout on every run; now the second run answers from the recorded failure."
    import docbench_nb.pages.assets as A
    p = tmp_path / 'loop.eps'
    p.write_bytes(b'%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\n{ } loop\n')
    calls = []
    real = A._render_eps
    monkeypatch.setattr(A, '_render_eps', lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    with pytest.raises(AssetError, match='killed after 2s'): convert_figure(p, cache_dir=cache, timeout=2)
    with pytest.raises(AssetError, match='killed after 2s .*cached failure'): convert_figure(p, cache_dir=cache, timeout=2)
    with pytest.raises(AssetError, match='cached failure'): convert_figure(p, cache_dir=cache, timeout=1)
    assert len(calls) == 1
    fig = Figure(label='fig:loop', caption='c', images=['loop.eps'])            # also through a whole paper
    _, warns = convert_paper_figures(Paper(id='x', root=str(tmp_path), figures=[fig]), cache_dir=cache, timeout=2)
    assert len(calls) == 1 and 'cached failure' in warns[0], warns
    with pytest.raises(AssetError, match='killed after 3s'): convert_figure(p, cache_dir=cache, timeout=3)   # longer: retried
    assert len(calls) == 2
    (tmp_path / 'cut.pdf').write_bytes(b'%PDF-1.4\n1 0 obj garbage')                 # a content failure, not a timeout
    with pytest.raises(AssetError) as e1: convert_figure(tmp_path / 'cut.pdf', cache_dir=cache)
    with pytest.raises(AssetError, match='cached failure') as e2: convert_figure(tmp_path / 'cut.pdf', cache_dir=cache, timeout=600)
    assert e1.value.reason in e2.value.reason


@needs_gs
def test_ghostscript_safer_blocks_file_access(tmp_path, cache):
    marker = tmp_path / 'written_by_ps.txt'
    p = tmp_path / 'evil.eps'
    p.write_bytes(b'%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\n'
                  b'(' + str(marker).encode() + b') (w) file (pwned) writestring\n0 0 moveto 100 100 lineto stroke showpage\n')
    try: convert_figure(p, cache_dir=cache)
    except AssetError: pass
    assert not marker.exists()


def test_run_tool_refuses_shell_strings_and_times_out():
    import sys
    with pytest.raises(TypeError): run_tool('ls', timeout=5)
    with pytest.raises(ToolTimeout): run_tool([sys.executable, '-c', 'while True: pass'], timeout=0.5)


def test_convert_paper_figures_never_raises(tmp_path, cache):
    root = tmp_path / 'paper'; (root / 'figs').mkdir(parents=True)
    Image.new('RGB', (20, 10), 'red').save(root / 'figs' / 'ok.png')
    (root / 'figs' / 'bad.jpg').write_bytes(b'nope')
    paper = Paper(id='p1', root=str(root), figures=[
        Figure(label='fig:a', images=['figs/ok.png', 'figs/bad.jpg']),
        Figure(label='fig:b', images=['figs/ok.png', 'figs/gone.png', '../outside.png'])])
    (tmp_path / 'outside.png').write_bytes((root / 'figs' / 'ok.png').read_bytes())
    pngs, warns = convert_paper_figures(paper, max_pixels=100, cache_dir=cache)
    assert list(pngs) == ['figs/ok.png']
    assert len(warns) == 3 and all(w.startswith('p1: figure') for w in warns)
    assert any('bad.jpg' in w for w in warns) and any('gone.png' in w for w in warns) and any('outside' in w for w in warns)


# ---------------------------------------------------------------- shared corpus
@pytest.mark.slow
@needs_pdftoppm
@needs_gs
def test_shared_corpus_figure_files_convert(shared_papers, tmp_path):
    "Every pdf/eps/png/jpg in a sample of real papers converts or fails with an AssetError naming it."
    exts = {'.pdf', '.eps', '.png', '.jpg', '.jpeg', '.ps'}
    files = [f for d in shared_papers for f in sorted(d.rglob('*')) if f.suffix.lower() in exts and f.is_file()]
    by_ext = {}
    for f in files: by_ext.setdefault(f.suffix.lower(), []).append(f)
    sample = [f for fs in by_ext.values() for f in fs[:6]]
    ok = 0
    for f in sample:
        try:
            out = convert_figure(f, max_pixels=600_000, cache_dir=tmp_path)
            (w, h), m = _size(out); assert m == 'RGB' and w * h <= 600_000; ok += 1
        except AssetError as e: assert str(f) in str(e)
    assert ok >= 0.8 * len(sample), f'{ok}/{len(sample)} converted'
