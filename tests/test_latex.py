"Tests for docbench_nb.latex.sources and .flatten: source loading, main-file detection, comment stripping, flattening, hostile input."
import gzip, io, json, os, tarfile, zipfile
from pathlib import Path
import pytest
from docbench_nb.latex.sources import (LatexSourceError, SourceTree, load_source, iter_sources, find_main_file,
                               read_text, strip_comments, safe_resolve, resolve_name)
from docbench_nb.latex.flatten import Flattened, flatten_latex

DOC = '\\documentclass{article}\n\\begin{document}\n%s\n\\end{document}\n'

def write_tree(root: Path, files: dict) -> Path:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes): p.write_bytes(text)
        else: p.write_text(text, encoding='utf-8')
    return root

def add_bytes(tf, name, data, **kw):
    ti = tarfile.TarInfo(name); ti.size = len(data)
    for k, v in kw.items(): setattr(ti, k, v)
    tf.addfile(ti, io.BytesIO(data))

@pytest.fixture
def cache(tmp_path): return tmp_path / 'cache'

# ---------------------------------------------------------------- comments
@pytest.mark.parametrize('src,expected', [
    ('a % note\nb', 'a b'),
    ('a\n% whole line\nb', 'a\nb'),
    ('a\n    % indented whole line\nb', 'a\nb'),
    ('foo%\n   bar', 'foobar'),
    ('foo%\n\nbar', 'foo\n\nbar'),
    ('a\n%c1\n%c2\n\nb', 'a\n\nb'),
    ('50\\% of all', '50\\% of all'),
    ('line\\\\% comment after a line break\nnext', 'line\\\\next'),
    ('\\verb|%x| y % z\nw', '\\verb|%x| y w'),
    ('\\url{http://x.org/a%20b} c', '\\url{http://x.org/a%20b} c'),
    ('\\href{http://x.org/%7Eme}{home} % c\n', '\\href{http://x.org/%7Eme}{home} \n'),
    ('% comment only', ''),
])
def test_strip_comments_percent(src, expected):
    assert strip_comments(src) == expected

def test_strip_comments_verbatim_envs_keep_percent():
    for env in ['verbatim', 'Verbatim', 'lstlisting', 'minted', 'verbatim*']:
        arg = '{python}' if env == 'minted' else ''
        src = f'x\n\\begin{{{env}}}{arg}\nprint(1) % not a comment\n\\end{{{env}}}\ny % gone\n'
        out = strip_comments(src)
        assert '% not a comment' in out and 'gone' not in out, env

def test_strip_comments_comment_inside_does_not_open_verbatim():
    out = strip_comments('% \\begin{verbatim}\nreal % cut\n\\end{verbatim}')
    assert out == 'real \\end{verbatim}'

def test_strip_comments_comment_env():
    assert strip_comments('p\n\\begin{comment}\nold % x\n\\end{comment}\nq') == 'p\nq'
    assert strip_comments('p \\begin{comment}old\\end{comment} q') == 'p  q'

def test_strip_comments_iffalse_nesting_and_else():
    assert strip_comments('p\n\\iffalse\nold \\ifx\\a\\b x\\else y\\fi more\n\\fi\nq') == 'p\nq'
    assert strip_comments('p \\iffalse A \\else B \\fi q') == 'p  B  q'
    assert strip_comments('p \\iftrue A \\else B \\fi q') == 'p  A  q'
    # a \fi inside a comment does not close the block; \ifthenelse has no \fi and must not count
    assert strip_comments('p\n\\iffalse\n% \\fi\n\\ifthenelse{x}{y}{z}\n\\fi\nq') == 'p\nq'
    # nested \iffalse
    assert strip_comments('a \\iffalse b \\iffalse c \\fi d \\fi e') == 'a  e'
    # comments inside the kept branch are still stripped
    assert strip_comments('\\iffalse x\\else kept % c\n\\fi') == ' kept \n'
    # \iffalse as an operand (\let, \expandafter, brace hacks) is not a block
    assert strip_comments('\\let\\ifdraft\\iffalse\nBODY \\fi') == '\\let\\ifdraft\\iffalse\nBODY \\fi'
    assert strip_comments('\\let\\ifdraft = \\iffalse BODY') == '\\let\\ifdraft = \\iffalse BODY'
    assert strip_comments('\\def\\x{\\iffalse}\\fi} BODY') == '\\def\\x{\\iffalse}\\fi} BODY'
    # unterminated \iffalse / comment environment is left alone rather than eating the paper
    assert 'rest' in strip_comments('\\begin{comment}\nrest')
    assert 'rest' in strip_comments('\\iffalse no fi here\nrest')

# ---------------------------------------------------------------- reading
def test_read_text_fallback(tmp_path):
    (tmp_path / 'u.tex').write_text('Müller', encoding='utf-8')
    (tmp_path / 'l.tex').write_bytes('Müller “x”'.encode('cp1252'))
    assert read_text(tmp_path / 'u.tex') == ('Müller', None)
    text, w = read_text(tmp_path / 'l.tex')
    assert text == 'Müller “x”' and 'l.tex' in w and 'UTF-8' in w

def test_flatten_non_utf8_warns(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % '\\input{lat}', 'lat.tex': 'Gr\xfc\xdfe'.encode('latin-1')})
    fl = flatten_latex(tmp_path)
    assert 'Grüße' in fl.text
    assert any('lat.tex' in w and 'UTF-8' in w for w in fl.warnings)

# ---------------------------------------------------------------- flattening: input forms
def test_flatten_input_forms(tmp_path):
    write_tree(tmp_path, {
        'main.tex': DOC % ('\\input{sections/a}\n\\input{sections/b.tex}\n\\input sections/c\n\\input{ sections/d }\n'
                          '\\include{e}\n\\subfile{sub/child}\n\\input{data.txt}'),
        'sections/a.tex': 'AAA\n', 'sections/b.tex': 'BBB', 'sections/c.tex': 'CCC', 'sections/d.tex': 'DDD',
        'e.tex': 'EEE', 'data.txt': 'TXT',
        'sub/child.tex': '\\documentclass[../main.tex]{subfiles}\n\\begin{document}\nCHILD\n\\end{document}\nJUNK'})
    fl = flatten_latex(tmp_path)
    for s in ['AAA', 'BBB', 'CCC', 'DDD', 'EEE', 'CHILD', 'TXT']: assert s in fl.text, s
    assert 'JUNK' not in fl.text and 'subfiles' not in fl.text and '\\input' not in fl.text
    assert fl.files == ['main.tex', 'sections/a.tex', 'sections/b.tex', 'sections/c.tex', 'sections/d.tex', 'e.tex',
                        'sub/child.tex', 'data.txt']
    assert fl.warnings == [] and fl.main_file == 'main.tex'
    assert fl.text.index('AAA') < fl.text.index('BBB') < fl.text.index('CHILD')

def test_flatten_does_not_touch_lookalikes(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % ('\\includegraphics{fig}\\inputencoding{utf8}\\bibliography{refs}'
                                             '\\newcommand{\\sec}[1]{\\input{s/#1}}'), 'refs.tex': 'NO'})
    fl = flatten_latex(tmp_path)
    for s in ['\\includegraphics{fig}', '\\inputencoding{utf8}', '\\bibliography{refs}', '\\input{s/#1}']: assert s in fl.text
    assert 'NO' not in fl.text and fl.warnings == []

def test_flatten_relative_to_main_dir_then_current(tmp_path):
    write_tree(tmp_path, {'paper/main.tex': DOC % '\\input{sec/a}',
                          'paper/sec/a.tex': 'A \\input{sec/b} \\input{c}',   # sec/b: from main dir; c: next to a.tex
                          'paper/sec/b.tex': 'BFROMMAIN', 'paper/sec/c.tex': 'CNEXT'})
    fl = flatten_latex(tmp_path)
    assert fl.main_file == 'paper/main.tex'
    assert 'BFROMMAIN' in fl.text and 'CNEXT' in fl.text and fl.warnings == []

def test_flatten_import_and_subimport(tmp_path):
    write_tree(tmp_path, {
        'main.tex': DOC % '\\import{chapters/one/}{body}\n\\subimport{chapters/two/}{body.tex}',
        'chapters/one/body.tex': 'ONE \\input{part}\n\\subimport{deeper/}{x}',
        'chapters/one/part.tex': 'ONEPART', 'chapters/one/deeper/x.tex': 'ONEDEEP',
        'chapters/two/body.tex': 'TWO \\input{part}', 'chapters/two/part.tex': 'TWOPART',
        'part.tex': 'WRONG-ROOT-PART'})
    fl = flatten_latex(tmp_path)
    for s in ['ONE', 'ONEPART', 'ONEDEEP', 'TWO', 'TWOPART']: assert s in fl.text, s
    assert 'WRONG-ROOT-PART' not in fl.text

def test_flatten_cycle_and_missing(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % '\\input{a}\\input{nothere}', 'a.tex': 'A\\input{b}', 'b.tex': 'B\\input{a}'})
    fl = flatten_latex(tmp_path, id='p')
    assert 'A' in fl.text and 'B' in fl.text
    assert any('include cycle' in w and 'a.tex' in w for w in fl.warnings)
    assert any('missing' in w and 'nothere' in w and 'main.tex' in w for w in fl.warnings)
    assert fl.files == ['main.tex', 'a.tex', 'b.tex']

def test_flatten_self_include_and_depth_limit(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % '\\input{main}\\input{d1}',
                          **{f'd{i}.tex': f'L{i} \\input{{d{i + 1}}}' for i in range(1, 8)}})
    fl = flatten_latex(tmp_path, max_depth=3)
    assert 'L3' in fl.text and 'L4' not in fl.text
    assert any('depth' in w for w in fl.warnings) and any('cycle' in w for w in fl.warnings)

def test_flatten_no_expansion_in_verbatim_and_endinput(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % '\\begin{verbatim}\n\\input{a}\n\\end{verbatim}\n\\verb|\\input{a}| \\input{b}',
                          'a.tex': 'SHOULD-NOT-APPEAR', 'b.tex': 'B1 \\endinput B2\nB3'})
    fl = flatten_latex(tmp_path)
    assert 'SHOULD-NOT-APPEAR' not in fl.text and '\\verb|\\input{a}|' in fl.text
    assert 'B1' in fl.text and 'B2' in fl.text and 'B3' not in fl.text   # rest of the \endinput line is read

def test_flatten_comments_per_file_and_after_end_document(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % 'X \\input{a}Y' + 'LEFTOVER', 'a.tex': 'A % trailing comment without newline'})
    fl = flatten_latex(tmp_path)
    assert 'Y' in fl.text and 'trailing' not in fl.text and 'LEFTOVER' not in fl.text

def test_flatten_standalone_child_body_only(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % '\\input{fig}', 'fig.tex': '\\documentclass{standalone}\n\\usepackage{tikz}\n'
                          '\\begin{document}\\tikz\\draw (0,0);\\end{document}'})
    fl = flatten_latex(tmp_path)
    assert fl.text.count('\\documentclass') == 1 and '\\tikz\\draw' in fl.text

def test_flatten_includeonly(tmp_path):
    write_tree(tmp_path, {'main.tex': '\\documentclass{book}\\includeonly{ch1}\n' + DOC.split('\n', 1)[1] % '\\include{ch1}\\include{ch2}',
                          'ch1.tex': 'ONE', 'ch2.tex': 'TWO'})
    assert 'TWO' not in flatten_latex(tmp_path).text
    assert 'TWO' in flatten_latex(tmp_path, honour_includeonly=False).text

def test_flatten_max_chars(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % ('\\input{big}' * 50), 'big.tex': 'x' * 1000})
    with pytest.raises(LatexSourceError, match='exceeds'): flatten_latex(tmp_path, id='p', max_chars=10_000)

def test_flatten_case_mismatch(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % '\\input{Intro}', 'intro.tex': 'INTRO'})
    fl = flatten_latex(tmp_path)
    assert 'INTRO' in fl.text and any('ignoring case' in w for w in fl.warnings)

# ---------------------------------------------------------------- main file
def test_main_file_tie_breaking(tmp_path):
    write_tree(tmp_path, {
        'figures/plot.tex': '\\documentclass{article}\\begin{document}' + 'x' * 5000 + '\\end{document}',
        'standalone_fig.tex': '\\documentclass{standalone}\\begin{document}' + 'y' * 5000 + '\\end{document}',
        'template.tex': '\\documentclass{article}\\begin{document}' + 'z' * 3000 + '\\end{document}',
        'ms.tex': DOC % '\\input{body}', 'body.tex': 'b',
        'commented.tex': '%\\documentclass{article}\n%\\begin{document}\n' + 'c' * 9000})
    assert find_main_file(tmp_path) == 'ms.tex'

def test_main_file_prefers_not_included_and_id(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % '\\input{whole}', 'whole.tex': DOC % ('w' * 5000)})
    assert find_main_file(tmp_path) == 'main.tex'       # whole.tex is \input by main.tex
    t2 = write_tree(tmp_path / 'two', {'2101.00001.tex': DOC % 'a', 'other.tex': DOC % ('b' * 100)})
    assert find_main_file(t2, id='2101.00001') == '2101.00001.tex'
    assert find_main_file(t2) == 'other.tex'            # without the id: larger wins

def test_main_file_subfiles_child_never_main(tmp_path):
    write_tree(tmp_path, {'main.tex': DOC % '\\subfile{c}',
                          'c.tex': '\\documentclass[main.tex]{subfiles}\n\\begin{document}' + 'c' * 9000 + '\\end{document}'})
    assert find_main_file(tmp_path) == 'main.tex'

def test_main_file_documentstyle_and_plain_single(tmp_path):
    write_tree(tmp_path / 'a', {'old.tex': '\\documentstyle[12pt]{article}\n\\begin{document}\nx\n\\end{document}', 'm.tex': 'macros'})
    assert find_main_file(tmp_path / 'a') == 'old.tex'
    write_tree(tmp_path / 'b', {'plain.tex': 'Hello \\bye'})
    assert find_main_file(tmp_path / 'b') == 'plain.tex'

def test_main_file_errors(tmp_path):
    write_tree(tmp_path / 'rnw', {'paper.Rnw': DOC % '<<>>=\n1\n@', 'figure/x.pdf': b'%PDF'})
    with pytest.raises(LatexSourceError, match='knitr/Sweave sources are not supported') as e:
        find_main_file(tmp_path / 'rnw', id='rpaper')
    assert 'rpaper' in str(e.value)
    write_tree(tmp_path / 'none', {'a.tex': 'macros', 'b.tex': 'more macros'})
    with pytest.raises(LatexSourceError, match='documentclass'): find_main_file(tmp_path / 'none', id='np')
    (tmp_path / 'empty').mkdir()
    with pytest.raises(LatexSourceError, match='no .tex'): find_main_file(tmp_path / 'empty', id='ep')

# ---------------------------------------------------------------- loading sources
def test_load_source_folder(tmp_path):
    write_tree(tmp_path / 'paper1', {'main.tex': DOC % 'x'})
    st = load_source(tmp_path / 'paper1')
    assert isinstance(st, SourceTree) and st.id == 'paper1' and st.root == str((tmp_path / 'paper1').resolve())

def test_load_source_archive_kinds(tmp_path, cache):
    src = write_tree(tmp_path / 'src', {'main.tex': DOC % '\\input{sec/a}', 'sec/a.tex': 'ARCHIVED'})
    with tarfile.open(tmp_path / '2101.00002v1.tar.gz', 'w:gz') as tf: tf.add(src, arcname='.')
    with tarfile.open(tmp_path / 'plain.tar', 'w') as tf: tf.add(src, arcname='.')
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode='w') as tf: tf.add(src, arcname='.')
    (tmp_path / '2101.00003').write_bytes(gzip.compress(raw.getvalue()))       # gzip of a tar, no extension
    with zipfile.ZipFile(tmp_path / 'ov.zip', 'w') as zf:
        zf.write(src / 'main.tex', 'main.tex'); zf.write(src / 'sec/a.tex', 'sec/a.tex')
    for name, pid in [('2101.00002v1.tar.gz', '2101.00002v1'), ('plain.tar', 'plain'), ('2101.00003', '2101.00003'), ('ov.zip', 'ov')]:
        st = load_source(tmp_path / name, cache_dir=cache)
        assert st.id == pid and st.warnings == []
        assert Path(st.root).is_relative_to(cache / 'sources')
        assert 'ARCHIVED' in flatten_latex(st.root, id=st.id).text, name

def test_load_source_gzipped_single_tex_and_cache_reuse(tmp_path, cache):
    (tmp_path / '2101.00001').write_bytes(gzip.compress((DOC % 'SINGLE').encode()))
    (tmp_path / 'x.gz').write_bytes(gzip.compress((DOC % 'SINGLE').encode()))
    st = load_source(tmp_path / '2101.00001', cache_dir=cache)
    assert os.listdir(st.root) == ['2101.00001.tex']
    assert 'SINGLE' in flatten_latex(st.root, id=st.id).text
    marker = Path(st.root) / 'marker'; marker.write_text('m')        # reused, not re-extracted
    assert load_source(tmp_path / '2101.00001', cache_dir=cache).root == st.root and marker.exists()
    assert load_source(tmp_path / 'x.gz', cache_dir=cache).id == 'x'

def test_load_source_default_cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv('DOCBENCH_CACHE', str(tmp_path / 'envcache'))
    (tmp_path / 'p.gz').write_bytes(gzip.compress((DOC % 'e').encode()))
    assert load_source(tmp_path / 'p.gz').root.startswith(str((tmp_path / 'envcache' / 'sources').resolve()))

def test_load_source_lone_tex_is_isolated(tmp_path, cache):
    write_tree(tmp_path, {'a.tex': DOC % '\\input{b}', 'b.tex': 'SIBLING-PAPER'})
    st = load_source(tmp_path / 'a.tex', cache_dir=cache)
    assert st.id == 'a' and os.listdir(st.root) == ['a.tex']
    fl = flatten_latex(st.root, id=st.id)
    assert 'SIBLING-PAPER' not in fl.text and any('missing' in w for w in fl.warnings)

def test_load_source_errors(tmp_path, cache):
    with pytest.raises(LatexSourceError, match='does not exist'): load_source(tmp_path / 'nope.tar.gz', cache_dir=cache)
    (tmp_path / 'p.pdf').write_bytes(b'%PDF-1.5 ...')
    with pytest.raises(LatexSourceError, match='PDF'): load_source(tmp_path / 'p.pdf', cache_dir=cache)
    (tmp_path / 'gp.gz').write_bytes(gzip.compress(b'%PDF-1.5' + b' ' * 600))
    with pytest.raises(LatexSourceError, match='PDF'): load_source(tmp_path / 'gp.gz', cache_dir=cache)
    (tmp_path / 'trunc.tar.gz').write_bytes(gzip.compress(b'x' * 5000)[:20])
    with pytest.raises(LatexSourceError, match='trunc.tar.gz'): load_source(tmp_path / 'trunc.tar.gz', cache_dir=cache)
    assert not [d for d in os.listdir(cache / 'sources') if not d.endswith('.json') and (cache / 'sources' / d).is_dir()
                and d.startswith('.')]

# ---------------------------------------------------------------- hostile input
def _leftovers(cache):
    s = cache / 'sources'
    return [d for d in os.listdir(s) if (s / d).is_dir()] if s.exists() else []

def test_tar_zip_slip_absolute_symlink_hardlink_device(tmp_path, cache):
    with tarfile.open(tmp_path / 'evil.tar.gz', 'w:gz') as tf:
        add_bytes(tf, '../../escaped.tex', b'ESC')
        add_bytes(tf, 'ok/../../../escaped2.tex', b'ESC')
        add_bytes(tf, '/tmp/absolute.tex', b'ABS')
        add_bytes(tf, 'link.tex', b'', type=tarfile.SYMTYPE, linkname='/etc/passwd')
        add_bytes(tf, 'hard.tex', b'', type=tarfile.LNKTYPE, linkname='/etc/passwd')
        add_bytes(tf, 'dev', b'', type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        add_bytes(tf, 'fifo', b'', type=tarfile.FIFOTYPE)
        add_bytes(tf, 'main.tex', (DOC % '\\input{link}').encode())
    st = load_source(tmp_path / 'evil.tar.gz', cache_dir=cache)
    files = sorted(str(p.relative_to(st.root)) for p in Path(st.root).rglob('*'))
    assert files == ['main.tex']
    assert not (tmp_path / 'escaped.tex').exists() and not Path('/tmp/absolute.tex').exists()
    assert len(st.warnings) == 7 and all('evil.tar.gz' in w for w in st.warnings)
    assert any('symlink' in w for w in st.warnings) and any('hard link' in w for w in st.warnings)
    fl = flatten_latex(st.root, id=st.id)
    assert 'root:' not in fl.text and any('missing' in w for w in fl.warnings)
    # warnings survive a cache hit
    assert load_source(tmp_path / 'evil.tar.gz', cache_dir=cache).warnings == st.warnings

def test_zip_slip_and_symlink_in_zip(tmp_path, cache):
    with zipfile.ZipFile(tmp_path / 'evil.zip', 'w') as zf:
        zf.writestr('../../escaped.tex', 'ESC')
        info = zipfile.ZipInfo('link.tex'); info.external_attr = 0o120777 << 16
        zf.writestr(info, '/etc/passwd')
        zf.writestr('main.tex', DOC % 'ok')
    st = load_source(tmp_path / 'evil.zip', cache_dir=cache)
    assert os.listdir(st.root) == ['main.tex'] and len(st.warnings) == 2

def test_gzip_bomb_and_member_limit(tmp_path, cache):
    (tmp_path / 'bomb.gz').write_bytes(gzip.compress(b'\\relax ' * 200_000))
    with pytest.raises(LatexSourceError, match="bomb.gz: member 'bomb.tex' expands past the 97.7 kB limit"):
        load_source(tmp_path / 'bomb.gz', cache_dir=cache, max_bytes=100_000)
    with tarfile.open(tmp_path / 'tbomb.tar.gz', 'w:gz') as tf: add_bytes(tf, 'big.tex', b'a' * 300_000)
    with pytest.raises(LatexSourceError, match="tbomb.tar.gz: member 'big.tex' expands past"):
        load_source(tmp_path / 'tbomb.tar.gz', cache_dir=cache, max_bytes=100_000)
    with tarfile.open(tmp_path / 'many.tar', 'w') as tf:
        for i in range(30): add_bytes(tf, f'f{i}.tex', b'x')
    with pytest.raises(LatexSourceError, match='many.tar.*more than 20'):
        load_source(tmp_path / 'many.tar', cache_dir=cache, max_members=20)
    assert _leftovers(cache) == []                      # nothing half-written left behind
    assert load_source(tmp_path / 'many.tar', cache_dir=cache).warnings == []   # default limits accept it

def test_fifty_megabytes_of_zeros_name_the_member_and_leave_no_tree(tmp_path, cache):
    "issue #12: a small .tex.gz that expands far past the limit: the error names the member, the cache keeps nothing."
    import zlib
    co = zlib.compressobj(9, zlib.DEFLATED, 31)                # gzip framing; 50 MB of zeros -> ~50 kB
    data = co.compress(b'\\documentclass{article}\n') + co.compress(bytes(50 * 1024**2)) + co.flush()
    (tmp_path / 'zeros.tex.gz').write_bytes(data)
    assert len(data) < 100_000
    with pytest.raises(LatexSourceError, match=r"paper zeros: archive .*zeros.tex.gz: member 'zeros.tex' expands past the 10.0 MB limit"):
        load_source(tmp_path / 'zeros.tex.gz', cache_dir=cache, max_bytes=10 * 1024**2)
    with tarfile.open(tmp_path / 'two.tar.gz', 'w:gz') as tf:       # a tar: the second member is the big one
        add_bytes(tf, 'main.tex', (DOC % 'x').encode()); add_bytes(tf, 'sub/huge.tex', bytes(50 * 1024**2))
    with pytest.raises(LatexSourceError, match="member 'sub/huge.tex' expands past the 10.0 MB limit"):
        load_source(tmp_path / 'two.tar.gz', cache_dir=cache, max_bytes=10 * 1024**2)
    assert _leftovers(cache) == [] and [p for p in (cache / 'sources').iterdir() if p.is_dir()] == []
    st = load_source(tmp_path / 'two.tar.gz', cache_dir=cache, max_bytes=100 * 1024**2)   # under a larger limit it unpacks
    assert os.path.getsize(Path(st.root) / 'sub' / 'huge.tex') == 50 * 1024**2

def test_input_outside_paper_refused(tmp_path):
    outside = tmp_path / 'secret.tex'; outside.write_text('TOP-SECRET')
    paper = write_tree(tmp_path / 'paper', {
        'main.tex': DOC % ('\\input{../secret}\\input{../../etc/passwd}\\input{/etc/passwd}\\input /etc/passwd '
                           '\\include{../secret}\\import{../}{secret}\\subimport{../}{secret}\\input{link}\\input{sub/../../secret}')})
    os.symlink(outside, paper / 'link.tex')
    fl = flatten_latex(paper, id='paper')
    assert 'TOP-SECRET' not in fl.text and 'root:' not in fl.text
    refused = [w for w in fl.warnings if 'refused path outside the paper' in w]
    assert len(refused) == 9 and all('main.tex' in w for w in refused)
    assert fl.files == ['main.tex']

def test_main_file_ignores_links_out_and_special_files(tmp_path):
    outside = write_tree(tmp_path / 'other', {'big.tex': DOC % ('o' * 9000)})
    paper = write_tree(tmp_path / 'paper', {'paper.tex': DOC % 'p'})
    os.symlink(outside / 'big.tex', paper / 'main.tex')
    os.mkfifo(paper / 'fifo.tex')                      # reading it would block forever
    assert find_main_file(paper) == 'paper.tex'
    fl = flatten_latex(paper)
    assert fl.files == ['paper.tex'] and 'ooo' not in fl.text

def test_safe_resolve(tmp_path):
    write_tree(tmp_path, {'p/fig.png': b'x', 'p/figs/a.pdf': b'x', 'p/figs/a.png': b'x', 'p/s/x.tex': 'x', 'out.png': b'x'})
    os.symlink(tmp_path / 'out.png', tmp_path / 'p' / 'sl.png')
    os.symlink(tmp_path / 'p' / 'fig.png', tmp_path / 'p' / 'inside.png')
    root = tmp_path / 'p'
    ex = ('.pdf', '.png', '.jpg')
    assert safe_resolve(root, '', 'figs/a', ex) == 'figs/a.pdf'
    assert safe_resolve(root, 's', '../fig', ex) == 'fig.png'
    assert safe_resolve(root, '', 'fig.png', ex) == 'fig.png'
    assert safe_resolve(root, '', 's/x') == 's/x.tex'
    assert safe_resolve(root, '', 'inside', ex) == 'fig.png'           # symlink inside the tree is fine
    assert safe_resolve(root, '', 'sl', ex) is None                    # symlink pointing outside
    assert safe_resolve(root, '', '../out', ex) is None
    assert resolve_name(root, '', '../out.png', ex) == (None, 'refused')
    assert resolve_name(root, '', '/etc/passwd') == (None, 'refused')
    assert resolve_name(root, '', 'nothing') == (None, 'missing')

# ---------------------------------------------------------------- iter_sources
def test_iter_sources(tmp_path):
    write_tree(tmp_path / 'coll', {'a/ms.tex': 'x', 'b/tex/ms.tex': 'x', 'b/figures/f.png': b'x', 'c/notes.md': 'x'})
    (tmp_path / 'coll' / '2101.00001').write_bytes(gzip.compress(b'x'))
    (tmp_path / 'coll' / 'p.tar.gz').write_bytes(b'')
    (tmp_path / 'coll' / 'README.txt').write_text('x')
    names = [Path(s).name for s in iter_sources(tmp_path / 'coll')]
    assert names == ['2101.00001', 'a', 'b', 'p.tar.gz']
    assert iter_sources(tmp_path / 'coll' / 'b') == [str(tmp_path / 'coll' / 'b')]
    assert iter_sources(tmp_path / 'coll' / 'a') == [str(tmp_path / 'coll' / 'a')]
    assert iter_sources(tmp_path / 'coll' / 'p.tar.gz') == [str(tmp_path / 'coll' / 'p.tar.gz')]

# ---------------------------------------------------------------- real corpus
def _manifest(shared_dir):
    return {d['id']: d for d in map(json.loads, (shared_dir / 'corpus' / 'manifest.jsonl').read_text().splitlines())}

@pytest.mark.slow
def test_corpus_main_files_and_flatten(shared_dir, shared_papers):
    man = _manifest(shared_dir)
    assert len(shared_papers) == 80
    assert [Path(p) for p in iter_sources(shared_dir / 'corpus' / 'papers')] == shared_papers
    mismatches, checked = [], 0
    for p in shared_papers:
        assert iter_sources(p) == [str(p)], p.name
        st = load_source(p)
        main = find_main_file(st.root, id=st.id)
        expected = man[p.name]['main_tex']
        if expected is not None:
            checked += 1
            if main != expected: mismatches.append((p.name, main, expected))
        fl = flatten_latex(st.root, id=st.id)
        assert fl.main_file == main and fl.files[0] == main
        assert '\\begin{document}' in fl.text and len(fl.text) > 5000, p.name
        assert all(p.name in w for w in fl.warnings)
    assert checked == 61
    assert mismatches == [], mismatches

@pytest.mark.slow
def test_latex_samples_as_lone_files(shared_dir, tmp_path):
    samples = sorted((shared_dir / 'latex-samples').glob('*.tex'))
    assert len(samples) == 114
    for s in samples:
        assert iter_sources(s) == [str(s)]
        st = load_source(s, cache_dir=tmp_path)
        assert os.listdir(st.root) == [s.name]
        fl = flatten_latex(st.root, id=st.id)
        assert fl.main_file == s.name and fl.files[0] == s.name
        assert '\\begin{document}' in fl.text, s.name

# ---------------------------------------------------------------- source map (flattened text -> file, line)
def _check_segments(fl, root):
    "Every mapped stretch of `fl.text` is exactly the text at that place of its file; returns the mapped share."
    src, mapped = {}, 0
    for k, (o, f, s) in enumerate(fl.segments):
        e = fl.segments[k + 1][0] if k + 1 < len(fl.segments) else len(fl.text)
        if f is None: continue
        if f not in src: src[f] = read_text(Path(root) / f)[0].replace('\r\n', '\n').replace('\r', '\n')
        assert fl.text[o:e] == src[f][s:s + e - o], (f, s, fl.text[o:e][:80], src[f][s:s + e - o][:80])
        mapped += e - o
    return mapped / max(1, len(fl.text))

def test_flatten_source_map(tmp_path):
    write_tree(tmp_path, {'main.tex': '\\documentclass{article}\n% preamble note\n\\begin{document}\nOne % c\n  two\n'
                                      '\\iffalse\nhidden\n\\fi\n\\input{sub/a}\n\\include{b}\n\\end{document}\nafter',
                          'sub/a.tex': '%head\nAlpha line\n\\begin{comment}\nx\n\\end{comment}\nBeta \\iftrue kept % y\n\\fi line\n\\endinput\nlost',
                          'b.tex': 'Bee\n'})
    fl = flatten_latex(tmp_path)
    assert _check_segments(fl, tmp_path) > 0.9
    at = lambda s: fl.source_at(fl.text.index(s))
    assert at('One') == ('main.tex', 4) and at('two') == ('main.tex', 5)
    assert at('Alpha') == ('sub/a.tex', 2) and at('Beta') == ('sub/a.tex', 6) and at('kept') == ('sub/a.tex', 6)
    assert fl.source_at(fl.text.rindex(' line')) == ('sub/a.tex', 7) and at('Bee') == ('b.tex', 1) and at('\\end{document}') == ('main.tex', 11)
    assert fl.source_at(len(fl.text)) is None and fl.source_at(fl.text.index('Bee') - 1) is None   # \include's blank line

@pytest.mark.slow
def test_corpus_flatten_source_map_exact(shared_papers):
    "Over the shared corpus the source map is exact and covers (nearly) all of the flattened text."
    for p in shared_papers:
        st = load_source(p)
        fl = flatten_latex(st.root, id=st.id)
        assert _check_segments(fl, st.root) > 0.999, p.name
