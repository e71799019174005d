"""Fuzzing in the test suite: property-based tests (hypothesis) of the scanner, the cleaner and the flattener, and a
bounded, seeded mutation run over shared papers. Longer runs: `python bench/fuzz.py`."""
import random
from pathlib import Path
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from docbench_nb.latex import tex
from docbench_nb.latex.tex import (brace_pairs, match_brace, match_bracket, read_arg, read_group, read_opt, verbatim_spans,
                             comment_spans, find_env_end, verbatim_end, document_bounds, env_pat, in_spans)
from docbench_nb.latex.clean import clean_latex
from docbench_nb.latex.sources import strip_comments, LatexSourceError
from docbench_nb.latex.flatten import flatten_latex
from docbench_nb.latex.parse import parse_text, parse_paper, PaperParseError
from docbench_nb.records import Paper

# TeX-significant pieces: what breaks scanners is structure, not random letters
PIECES = [r'\begin{', r'\end{', 'tabular}', 'comment}', 'verbatim}', 'figure}', 'equation}', 'x}', '{', '}', '[', ']',
          '%', '\\', '\\\\', '$', '$$', r'\verb|', '|', r'\input{', r'\iffalse', r'\fi', r'\section{', r'\caption{',
          r'\label{a}', r'\ref{a}', r'\section', r'\textbf', r'\newcommand{\x}[1]{#1}', r'\def\y#1{#1#1}', r'\x{', '&', '\n', '\n\n', ' ', 'ab',
          r'\begin{document}', r'\end{document}', '\x00', 'é', '\r']
tex_text = st.lists(st.sampled_from(PIECES), max_size=80).map(''.join)
FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _scan_env_end(s, i, env, stop=None, skip=()):
    depth = 1
    for m in env_pat(env).finditer(s, i, len(s) if stop is None else stop):
        if skip and in_spans(m.start(), skip): continue
        depth += 1 if m.group(1) == 'begin' else -1
        if depth == 0: return m.start(), m.end()


# ---------------------------------------------------------------- the scanner
@FUZZ
@given(tex_text, st.integers(0, 400))
def test_scanner_spans_in_range(s, i):
    pairs, unclosed, stray = brace_pairs(s)
    assert all(0 <= a < b < len(s) and s[a] == '{' and s[b] == '}' for a, b in pairs.items())
    i = min(i, len(s))
    for f in (match_brace, match_bracket):
        e = f(s, i)
        assert e == -1 or i <= e < len(s)
    for f in (read_arg, read_group, read_opt):
        content, end = f(s, i)
        assert content is None and end == i or (isinstance(content, str) and i < end <= len(s))
    for spans in (verbatim_spans(s), comment_spans(s)):
        assert all(0 <= a <= b <= len(s) for a, b in spans) and spans == sorted(spans)
    bd = document_bounds(s)
    assert bd is None or 0 <= bd[0] < bd[1] <= bd[2] <= len(s)


@FUZZ
@given(tex_text, st.integers(0, 400), st.sampled_from(['tabular', 'comment', 'x']), st.integers(1, 60))
def test_env_index_agrees_with_the_scan(s, i, env, reps):
    s = s * reps                                      # long enough, often, for the index
    i, skip = min(i, len(s)), verbatim_spans(s)
    for sk in ((), skip):
        assert find_env_end(s, i, env, skip=sk) == _scan_env_end(s, i, env, skip=sk)
    e = s.find('\\end{%s}' % env, i)
    assert verbatim_end(s, env, i) == (None if e < 0 else (e, e + len(env) + 6))


# ---------------------------------------------------------------- the cleaner and the parser
@FUZZ
@given(tex_text)
def test_cleaner_and_parser_never_raise(s):
    assert isinstance(strip_comments(s), str)
    assert isinstance(clean_latex(s), str)
    p = parse_text(s)
    assert isinstance(p, Paper)
    n = len(p.text)
    for r in p.sections + p.paragraphs + p.figures + p.tables + p.equations:
        assert 0 <= r.span[0] <= r.span[1] <= n
    for r in p.figures + p.tables:
        assert all(0 <= a <= b <= n for a, b in r.ref_spans)


# ---------------------------------------------------------------- the flattener
@settings(max_examples=60, deadline=3000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture], derandomize=True)
@given(main=tex_text, sub=tex_text)
def test_flattener_raises_only_its_error(tmp_path, main, sub):
    d = tmp_path / 'p'; d.mkdir(exist_ok=True)
    (d / 'main.tex').write_text('\\documentclass{article}' + main + '\\input{sub}', encoding='utf-8', errors='surrogatepass')
    (d / 'sub.tex').write_text(sub + '\\input{main}\\input{../../etc/passwd}', encoding='utf-8')
    try: fl = flatten_latex(d, main_file='main.tex')
    except LatexSourceError: return
    assert isinstance(fl.text, str)
    assert all((d / f).resolve().is_relative_to(d.resolve()) for f in fl.files)    # never reads outside the paper
    assert "passwd" not in "".join(fl.files) and "root:" not in fl.text


# ---------------------------------------------------------------- seeded mutations of real papers
def mutate(text, rng):
    "One random damage: byte flips, truncation, unclosed braces/environments, lone backslashes, repeated openings."
    k = rng.randrange(7)
    if k == 0:
        b = bytearray(text.encode('utf-8'))
        for _ in range(rng.randint(1, 20)): b[rng.randrange(len(b))] = rng.randrange(256)
        return b.decode('utf-8', 'replace'), 'byte flips'
    if k == 1: return text[:rng.randrange(len(text))], 'truncation'
    if k == 2: return text[:rng.randrange(len(text))] + '\\', 'lone trailing backslash'
    i = rng.randrange(len(text))
    if k == 3: return text[:i] + '{' * rng.randint(1, 50) + text[i:], 'unclosed braces'
    if k == 4: return text[:i] + '\\begin{%s}' % rng.choice(['tabular', 'comment', 'figure', 'itemize', 'verbatim']) + text[i:], 'unclosed environment'
    if k == 5: return text[:i] + ('\\begin{%s}{cc} a & b \\\\\n' % rng.choice(['tabular', 'comment'])) * rng.randint(100, 3000) + text[i:], 'repeated openings'
    return text[:i] + '}' * rng.randint(1, 50) + '\\end{document}' * rng.randint(0, 2) + text[i:], 'stray closers'


def _env_tags(text): return text.count('\\begin') + text.count('\\end')


def test_mutation_run_over_shared_papers(shared_papers, tmp_path, monkeypatch):
    "Damaged papers parse without raising, and with bounded work: counted scans, not timed ones."
    import docbench_nb.latex.clean as C, docbench_nb.latex.parse as P
    work = {'brace_chars': 0, 'sentences': 0}
    real_pairs, real_span = C.brace_pairs, P.sentence_span
    monkeypatch.setattr(C, 'brace_pairs', lambda s: (work.__setitem__('brace_chars', work['brace_chars'] + len(s)), real_pairs(s))[1])
    monkeypatch.setattr(P, 'sentence_span', lambda *a, **k: (work.__setitem__('sentences', work['sentences'] + 1), real_span(*a, **k))[1])
    def reset():
        work.update(brace_chars=0, sentences=0); tex.SCAN_STATS['env_tokens'] = 0
    def assert_bounded(n_chars, n_env, what):
        # measured on these 51 cases: brace scans ≤ 1.11 × the source (one pass over the body, and the title, abstract and
        # captions again), environment tokens visited ≤ 1.0 × the \begin/\end in it; a scan per group or per opening
        # (the quadratic behaviour this guards against) is hundreds of times that on the 'repeated openings' cases
        assert work['brace_chars'] <= 1.25 * n_chars + 1000, (what, work, n_chars)
        assert tex.SCAN_STATS['env_tokens'] <= n_env + 10, (what, tex.SCAN_STATS, n_env)
        return work['brace_chars'] + tex.SCAN_STATS['env_tokens']
    monkeypatch.setitem(tex.SCAN_STATS, 'env_tokens', 0)
    rng, heaviest, n = random.Random(12), (0, None), 0
    for paper in shared_papers[::20][:4]:
        tree_text = flatten_latex(paper).text
        for _ in range(12):
            bad, what = mutate(tree_text, rng)
            reset()
            p = parse_text(bad, id=paper.name)                # must not raise
            assert isinstance(p, Paper) and all(0 <= s.span[0] <= s.span[1] <= len(p.text) for s in p.paragraphs)
            heaviest = max(heaviest, (assert_bounded(len(bad), _env_tags(bad), what), what))
            assert work['sentences'] <= p.meta['n_refs_to_floats'], (what, work)   # one bounded window per reference
            n += 1
    # whole folders: damaged main files go through the flattener and the parser's error type
    for i, paper in enumerate(shared_papers[1::20][:3]):
        d = tmp_path / paper.name; 
        import shutil; shutil.copytree(paper, d)
        for f in sorted(d.rglob('*.tex'))[:3]:
            text, _ = mutate(f.read_text(encoding='utf-8', errors='replace'), rng)
            f.write_text(text, encoding='utf-8', errors='replace')
        texts = [f.read_text(encoding='utf-8', errors='replace') for f in d.rglob('*.tex')]
        reset()
        try: assert isinstance(parse_paper(d), Paper)
        except PaperParseError as e: assert e.reason and e.paper == paper.name
        assert_bounded(sum(map(len, texts)), sum(map(_env_tags, texts)), paper.name)
        n += 1
    print(f'heaviest case: {heaviest[1]} ({heaviest[0]:,} characters and environment tokens scanned)')
    assert n == 51


@pytest.mark.slow
def test_one_megabyte_of_unclosed_environments_is_linear():
    for env in ('tabular', 'comment'):
        body = ('\\begin{%s}{cc} a & b \\\\\n' % env) * 36_000              # ~1 MB
        tex.SCAN_STATS['env_tokens'] = 0
        p = parse_text('\\documentclass{article}\\begin{document}\n' + body + '\\end{document}')
        assert isinstance(p, Paper)
        assert tex.SCAN_STATS['env_tokens'] < 10 * 36_000                 # each opening visited a bounded number of times
