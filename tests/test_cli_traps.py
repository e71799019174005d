"""The command line and API traps of issue 22: outputs checked before the work, one set of defaults shown in --help,
global options after the sub-command, help/description/examples everywhere, results that save and load by the same
names, `docbench compare`, parse failures and unsupported files reported, and query building a user can follow."""
import argparse, inspect, json, os, shutil, warnings
from pathlib import Path
import pytest

import docbench_nb as db
from docbench_nb.cli import build_parser, main, walk_parsers
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.records import Query, Run
from docbench_nb.evaluation.metrics import score_run
from docbench_nb.evaluation.result import Result, DEFAULT_RETRIEVER


def _toy(name, scores):
    qs = [Query('q1', 'a', doc_ids=['A'], evidence_type='text'), Query('q2', 'b', doc_ids=['B'], evidence_type='table'),
          Query('q3', 'c', doc_ids=['A'], evidence_type='text')]
    run = Run(scores=scores, name=name)
    return Result.from_dict({'config': {'representation': 'text', 'retriever': name, 'chunk_size': 256}, **score_run(run, qs),
                             'n_docs': 2, 'n_queries': 3, 'run': run})

A = {'q1': {'A': 2.0, 'B': 1.0}, 'q2': {'A': 2.0, 'B': 1.0}, 'q3': {'A': 0.5}}
B = {'q1': {'A': 2.0}, 'q2': {'B': 3.0, 'A': 1.0}}


# ---------------------------------------------------------------- outputs are checked before any work
def test_out_under_a_file_is_refused_before_the_evaluation(tmp_path, capsys):
    (tmp_path / 'afile').write_text('x')
    rc = main(['-q', '--cache-dir', str(tmp_path / 'c'), 'evaluate', '--corpus', str(demo_corpus_dir()),
               '--queries', str(demo_queries_path()), '--out', str(tmp_path / 'afile' / 'res.json')])
    out, err = capsys.readouterr()
    assert rc == 2 and 'is a file' in err and out == ''          # no table printed: nothing was evaluated
    assert not (tmp_path / 'c').exists()                          # not even the cache was touched


def test_existing_out_needs_force(tmp_path, capsys):
    (tmp_path / 'r.json').write_text('{}')
    rc = main(['-q', 'evaluate', '--corpus', str(demo_corpus_dir()), '--queries', str(demo_queries_path()),
               '--out', str(tmp_path / 'r')])                     # `.json` is added, so r.json is what would be replaced
    assert rc == 2 and '--force' in capsys.readouterr().err
    (tmp_path / 'ro').mkdir(); (tmp_path / 'ro').chmod(0o500)
    try:
        if not os.access(tmp_path / 'ro', os.W_OK):               # root writes anywhere: nothing to check then
            rc = main(['queries', 'filter', '--corpus', 'c', '--queries', 'q', '--out', str(tmp_path / 'ro' / 'f.jsonl')])
            assert rc == 2 and 'not writable' in capsys.readouterr().err
    finally: (tmp_path / 'ro').chmod(0o700)


def test_evaluate_with_force_global_options_after_and_name_without_json(tmp_path, capsys):
    (tmp_path / 'res.json').write_text('{}')
    rc = main(['evaluate', '--corpus', str(demo_corpus_dir()), '--queries', str(demo_queries_path()), '--chunk-size', '256',
               '--out', str(tmp_path / 'res'), '--force', '--cache-dir', str(tmp_path / 'c'), '-q'])
    assert rc == 0 and f"wrote {tmp_path / 'res.json'}" in capsys.readouterr().out
    res = db.load_results(tmp_path)                               # what evaluate --out wrote, load_results finds
    assert len(res) == 1 and res[0].config['retriever'] == DEFAULT_RETRIEVER
    assert (tmp_path / 'c').is_dir()                              # --cache-dir after the sub-command was used
    assert (tmp_path / 'res.json').stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask():
    m = os.umask(0); os.umask(m); return m


# ---------------------------------------------------------------- defaults, help, descriptions, examples
def test_one_default_retriever_for_cli_and_api():
    a = build_parser().parse_args(['evaluate', '--corpus', 'c', '--queries', 'q'])
    sig = inspect.signature(db.evaluate).parameters
    assert a.retriever == sig['retriever'].default == DEFAULT_RETRIEVER == 'bm25'
    assert a.representation == sig['representation'].default and a.k == sig['k'].default
    ev = next(p for path, p, _ in walk_parsers(build_parser()) if path == ('evaluate',))
    assert '(default: bm25)' in ev.format_help() and '(default: 10)' in ev.format_help()


@pytest.mark.parametrize('argv', [['--cache-dir', 'C', '-q', 'stats', 'x'], ['stats', 'x', '--cache-dir', 'C', '-q'],
                                  ['queries', '--cache-dir', 'C', 'filter', '--corpus', 'c', '--queries', 'q', '--out', 'o', '-q'],
                                  ['cache', 'verify', '--cache-dir', 'C', '--quiet']])
def test_global_options_before_or_after_the_subcommand(argv):
    a = build_parser().parse_args(argv)
    assert (a.cache_dir, a.quiet) == ('C', True)
    assert build_parser().parse_args(['stats', 'x']).cache_dir is None   # not given: the top-level default, not SUPPRESS


def test_every_option_of_every_subcommand_has_help_and_every_subcommand_a_description_and_examples():
    missing, bare = {}, []
    for path, p, _ in walk_parsers(build_parser()):
        names = {a.option_strings[-1] if a.option_strings else a.dest for a in p._actions
                 if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not (a.help or '').strip()}
        if names: missing[' '.join(path)] = sorted(names)
        if path and (not p.description or 'examples:' not in (p.epilog or '')): bare.append(' '.join(path))
    assert not missing, f'options without help: {missing}'
    assert not bare, f'sub-commands without a description or examples: {bare}'


# ---------------------------------------------------------------- results: save, load_result, load_results, compare
def test_save_load_result_and_load_results_agree_on_names(tmp_path):
    r = _toy('a', A)
    p = r.save(tmp_path / 'x')                                     # no suffix: .json added
    assert p == tmp_path / 'x.json' and p.is_file() and (tmp_path / 'x.json.run').is_file()
    assert [x.overall for x in db.load_results(tmp_path)] == [r.overall]       # the folder finds it
    assert db.load_results(p)[0].overall == r.overall                          # a file: that file
    assert db.load_result(tmp_path / 'x').overall == db.load_result(p).overall == r.overall
    assert db.load_result(p).run.scores == r.run.scores
    with pytest.raises(IsADirectoryError, match='load_results'): db.load_result(tmp_path)
    with pytest.raises(FileNotFoundError, match='no result file'): db.load_result(tmp_path / 'nope.json')


def test_compare_command_prints_a_table_naming_metric_and_level(tmp_path, capsys):
    a, b = _toy('a', A).save(tmp_path / 'A.json'), _toy('b', B).save(tmp_path / 'B.json')
    rc = main(['compare', str(a), str(b), '--resamples', '200', '--out', str(tmp_path / 'cmp.json')])
    out = capsys.readouterr().out
    assert rc == 0
    head = out.splitlines()[0].split('  ')
    assert {'ndcg@10 (L0)', 'recall@1 (L0)', 'Δ ndcg@10 vs a', 'p(ndcg@10) vs a'} <= {h.strip() for h in head if h.strip()}
    assert 'mean' not in out.splitlines()[0] and 'Holm' in out
    t = json.loads((tmp_path / 'cmp.json').read_text())
    assert t['rows'][0][:2] == ['a', 'A'] and t['metrics'][0] == 'ndcg@10'
    assert main(['compare', str(a), str(b), '--metrics', 'ndcg@99']) == 2 and 'no metric' in capsys.readouterr().err
    t = db.compare([_toy('a', A), _toy('b', B)], metric='recall@1', n_resamples=100)   # the DataFrame names its metric when printed
    assert t.columns.name == 'recall@1 (L0)' and 'recall@1 (L0)' in t.to_string()


# ---------------------------------------------------------------- parse: failures and unsupported files are said
def test_parse_of_a_pdf_exits_nonzero(tmp_path, capsys):
    (tmp_path / 'x.pdf').write_bytes(b'%PDF-1.4 not latex')
    rc = main(['-q', '--cache-dir', str(tmp_path / 'c'), 'parse', str(tmp_path / 'x.pdf'), '--workers', '1'])
    out, err = capsys.readouterr()
    assert rc == 1 and 'ERROR' in out and '1 errors' in err


def test_unsupported_files_in_a_corpus_folder_are_reported(tmp_path, capsys):
    corpus = tmp_path / 'corpus'; corpus.mkdir()
    for name in ('karst-spring-recession', 'bat-activity-streetlights'):
        shutil.copytree(demo_corpus_dir() / name, corpus / name)
    (corpus / 'paper.pdf').write_bytes(b'%PDF-1.4'); (corpus / 'notes.docx').write_bytes(b'PK')
    rc = main(['-q', '--cache-dir', str(tmp_path / 'c'), 'parse', str(corpus), '--json', '--workers', '1'])
    out, err = capsys.readouterr()
    assert rc == 0 and len(out.splitlines()) == 2
    assert 'skipped' in err and 'paper.pdf: a PDF, not LaTeX source' in err and 'notes.docx' in err


# ---------------------------------------------------------------- query building a user can follow
class Fake:
    "A chat model answering by prompt (the contract of docbench_nb.llm)."
    name, fingerprint = 'fake', 'fake-traps-1'
    def __init__(self): self.stats = {'calls': 0}
    def chat(self, messages, **kw):
        from docbench_nb.llm import LLMReply
        self.stats['calls'] += 1
        sys_, user = messages[0]['content'], messages[-1]['content']
        q = lambda: user.split('QUESTION: ')[1].split('\n')[0]
        if 'benchmark of scientific' in sys_:
            w = [x for x in user.split('EVIDENCE:')[1].split() if x.isalpha() and len(x) > 7][:2]
            a = {'question': f"Which investigation of {' and '.join(w)} involved purple zebra meadows?", 'answer': 'it'}
        elif 'stand on their own' in sys_ or 'search engine' in sys_: a = {'query': q()}
        elif 'You check' in sys_: a = {'valid': True, 'labels': []}
        elif 'You rephrase' in sys_: a = {'rephrasing': f'Put differently ({len(user)}): ' + q()}
        elif 'You compare' in sys_: a = {'same_meaning': True, 'same_answer': True}
        else: a = {'answers': False}
        return LLMReply(json.dumps(a), prompt_tokens=7, completion_tokens=3)
    def chat_many(self, many, **kw): return [self.chat(m, **kw) for m in many]


@pytest.fixture(scope='module')
def three_papers(tmp_path_factory):
    from docbench_nb.latex.corpus import load_papers
    ps, errors = load_papers(demo_corpus_dir(), cache_dir=tmp_path_factory.mktemp('c'), progress=False)
    assert not errors
    return ps[:3]


def test_bm25_k_the_corpus_cannot_meet_warns_and_the_sheet_says_why(three_papers, tmp_path, capsys):
    from docbench_nb.queries.build import build_queries
    with pytest.warns(UserWarning, match=r"--bm25-k 5 >= the corpus's 3 papers"):
        res = build_queries(None, Fake(), tmp_path / 'o', types=('text',), per_paper=1, bm25_k=5, papers=three_papers)
    assert res['n_queries'] == 0 and res['n_dropped'] == 3 and len(res['warnings']) == 1
    html = (tmp_path / 'o' / 'review.html').read_text()
    assert 'Dropped candidates (3)' in html and html.count('too easy: BM25 ranks the gold paper') == 3 and '<td>bm25</td>' in html
    assert (tmp_path / 'o' / 'queries.jsonl').stat().st_mode & 0o777 == 0o666 & ~_umask()
    # progress: a bar per stage, counting items, on stderr; the k warning comes first, before any model call
    res = build_queries(None, Fake(), tmp_path / 'p', types=('text',), per_paper=1, bm25_k=5, papers=three_papers, progress=True)
    err = capsys.readouterr().err
    assert err.index('warning: --bm25-k 5') < err.index('generate')
    assert all(s in err for s in ('extract', 'generate', 'decontextualize', 'bm25', 'false_negative')) and '3/3' in err


def test_attrition_plot_draws_zero_at_zero(three_papers, tmp_path):
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from docbench_nb.queries.build import build_queries
    from docbench_nb.queries.review import plot_attrition as plot_attrition_counts
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        res = build_queries(None, Fake(), tmp_path / 'o', types=('text',), per_paper=1, bm25_k=5, papers=three_papers)
    ax = plot_attrition_counts(res['attrition'])
    y = list(ax.lines[0].get_ydata())
    assert ax.get_yscale() == 'symlog' and y[-1] == 0 and min(y) == 0            # plotted at 0, not clipped to 0.8
    assert '0' in [t.get_text() for t in ax.texts]                                 # and labelled
    plt.close(ax.figure)
    assert (tmp_path / 'o' / 'attrition.png').read_bytes()[:4] == b'\x89PNG'
