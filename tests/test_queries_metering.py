"""Metering: the judge's calibration calls are counted (and budgeted) like every stage's, and a dry run counts prompt
tokens with the local model's own tokenizer, saying so."""
import json
import pytest

from docbench_nb.demo import demo_corpus_dir
from docbench_nb.latex.corpus import load_papers
from docbench_nb.llm import LocalLLM, make_llm
from docbench_nb.testing import ScriptedChatServer
from docbench_nb.queries.build import BUILD_STAGES, build_queries
from docbench_nb.queries.selection import BudgetExceeded, estimate_calls
from docbench_nb.queries.llm_stages import fenced_text, generation_prompt
from docbench_nb.queries.evidence import extract_evidence
from docbench_nb.queries.calibration import calibration_items

PAPERS = ('bat-activity-streetlights', 'clinical-abbrev-rap')

from scripted_pipeline import reply             # the one scripted model of the pipeline tests

@pytest.fixture(scope='module')
def papers(tmp_path_factory):
    cache = tmp_path_factory.mktemp('meter-cache')
    ps, errors = load_papers([demo_corpus_dir() / p for p in PAPERS], cache_dir=cache, progress=False)
    assert len(ps) == 2, errors
    return ps, cache

def test_calibration_calls_are_metered_and_budgeted(papers, tmp_path):
    ps, cache = papers
    with ScriptedChatServer(default=reply) as srv:
        llm = make_llm(f'openai:scripted@{srv.base_url}?concurrency=4&max_retries=0', cache_dir=tmp_path / 'llm')
        res = build_queries(None, llm, tmp_path / 'o', types=('text',), per_paper=1, bm25_k=0, papers=ps, cache_dir=tmp_path / 'c1',
                            top_n=1, calibration=True)
        spent = res['attrition']['spent']
        calib_calls = sum(m['calls'] for m in spent['calibration'].values())
        assert calib_calls == len(calibration_items())                                   # one call an item, none cached
        assert sum(m['calls'] for s in spent.values() for m in s.values()) == srv.n_calls        # every request metered
        assert spent['calibration']['openai:scripted']['prompt_tokens'] == 50 * calib_calls
        # a budget smaller than the calibration stops inside it, cleanly, with budget.json saying where
        n = srv.n_calls
        llm2 = make_llm(f'openai:scripted@{srv.base_url}?concurrency=1&max_retries=0', cache_dir=tmp_path / 'llm2')
        with pytest.raises(BudgetExceeded, match='in stage calibration'):
            build_queries(None, llm2, tmp_path / 'b', types=('text',), per_paper=1, papers=ps, cache_dir=tmp_path / 'c2', calibration=True, budget=600)
        b = json.loads((tmp_path / 'b' / 'budget.json').read_text())
        assert (b['stopped_in'], b['spent'], srv.n_calls - n) == ('calibration', 600, 10)

def test_dry_run_counts_with_the_local_tokenizer(papers, tmp_path):
    ps, cache = papers
    llm = LocalLLM(); llm.cache_dir = tmp_path / 'llm'          # the converted model from the default cache; replies cached apart
    res = build_queries(None, llm, tmp_path / 'dry', types=('text',), per_paper=1, bm25_k=0, papers=ps, cache_dir=cache, dry_run=True)
    est = res['estimate']
    assert llm._loaded is None                                  # counting loaded the tokenizer, not the model
    assert est['total']['token_count'] == {'generator': 'tokenizer', 'judge': 'tokenizer'} and 'tokenizer' in est['total']['note']
    evs, _ = extract_evidence(ps, types=('text',), per_paper=1, cache_dir=cache)
    chars = estimate_calls(evs, generator='local', judge='local')
    assert chars['total']['token_count'] == {'generator': 'characters / 4', 'judge': 'characters / 4'}
    assert est['generate']['calls'] == chars['generate']['calls'] == 2 and est['generate']['prompt_tokens'] != chars['generate']['prompt_tokens']
    # (tests/test_llm_kv_cache.py checks that the count is what a real generation reports)
    pr = generation_prompt('text')
    assert est['generate']['prompt_tokens'] == sum(llm.count_tokens(pr.messages(evidence=e.text), pr.schema) for e in evs)

def test_budget_stop_inside_rephrase_resumes_without_repeating_calls(papers, tmp_path):
    "A budget stop between one query's rephrase calls; the rerun (a fresh LLM cache: only the stage store can save calls) asks only the rest."
    ps, cache = papers
    with ScriptedChatServer(default=reply) as srv:
        def run(out, llm_cache, budget=None):
            llm = make_llm(f'openai:scripted@{srv.base_url}?concurrency=1&max_retries=0', cache_dir=tmp_path / llm_cache)
            return build_queries(None, llm, tmp_path / out, types=('text',), per_paper=1, bm25_k=0, papers=ps, cache_dir=cache,
                                 top_n=2, budget=budget)
        # 8 calls before rephrase (generate, decontextualize, verify, naturalize for 2 queries) at 60 tokens: 480 spent;
        # a budget of 650 lets three rephrase calls through (the first query's level 1 and its check, level 2), then stops
        with pytest.raises(BudgetExceeded, match='in stage rephrase'): run('run', 'l1', budget=650)
        n_stop = srv.n_calls
        b = json.loads((tmp_path / 'run' / 'budget.json').read_text())
        assert (n_stop, b['stopped_in'], sum(m['calls'] for m in b['spent_by_stage']['rephrase'].values())) == (11, 'rephrase', 3)
        run('run', 'l2')
        n_resume = srv.n_calls - n_stop
        run('full', 'l3')
        n_full = srv.n_calls - n_stop - n_resume
    assert n_full == 8 + 2 * 6 + 2                             # + one false-negative call a query (the other paper)
    assert n_stop + n_resume == n_full                         # none asked twice
    same = lambda out: [{k: v for k, v in json.loads(l).items()} for l in (tmp_path / out / 'queries.jsonl').read_text().splitlines()]
    assert same('run') == same('full') and len(same('full')) == 2

@pytest.fixture(scope='module')
def papers3(tmp_path_factory):
    "Three papers: every query has two other papers for the false-negative judge (two calls a query, a stop can fall between)."
    cache = tmp_path_factory.mktemp('meter-cache3')
    ps, errors = load_papers([demo_corpus_dir() / p for p in PAPERS + ('coiled-metamaterial-absorber',)], cache_dir=cache, progress=False)
    assert len(ps) == 3, errors
    return ps, cache

@pytest.mark.parametrize('stage', ['answer_check', 'false_negative'])
def test_budget_stop_inside_answer_check_or_false_negative_resumes_without_repeating_calls(papers3, tmp_path, stage):
    """A budget stop between the first query's two calls of `stage` (the blind answer and its comparison; the judge on two
    other papers); the rerun (a fresh LLM cache: only the stage store can save calls) asks only the calls not yet made."""
    ps, cache = papers3
    with ScriptedChatServer(default=reply) as srv:
        def run(out, llm_cache, budget=None):
            llm = make_llm(f'openai:scripted@{srv.base_url}?concurrency=1&max_retries=0', cache_dir=tmp_path / llm_cache)
            return build_queries(None, llm, tmp_path / out, types=('text',), per_paper=1, bm25_k=0, papers=ps, cache_dir=cache,
                                 top_n=3, answer_check=True, budget=budget)
        full = run('full', 'l0')
        n_full = srv.n_calls
        first = json.loads((tmp_path / 'full' / 'stages' / f'{stage}.jsonl').read_text().splitlines()[0])
        assert (first['output']['blind_answer'] if stage == 'answer_check' else len(first['input']['candidates']) == 2)
        spent = full['attrition']['spent']
        before = sum(m['prompt_tokens'] + m['completion_tokens'] for s in BUILD_STAGES[:BUILD_STAGES.index(stage)] for m in spent.get(s, {}).values())
        # the stage's first call is let through (60 tokens); its second finds the budget spent
        with pytest.raises(BudgetExceeded, match=f'in stage {stage}'): run('run', 'l1', budget=before + 30)
        n_stop = srv.n_calls - n_full
        b = json.loads((tmp_path / 'run' / 'budget.json').read_text())
        assert (b['stopped_in'], sum(m['calls'] for m in b['spent_by_stage'][stage].values())) == (stage, 1)
        assert len((tmp_path / 'run' / 'stages' / f'{stage}_calls.jsonl').read_text().splitlines()) == 1   # the paid call, kept
        run('run', 'l2')
        n_resume = srv.n_calls - n_full - n_stop
    assert n_stop + n_resume == n_full                         # none asked twice
    assert n_full == 3 * (4 + 2 + 6 + 2)                       # generate..naturalize, answer check, rephrase, false negatives
    lines = lambda out: (tmp_path / out / 'queries.jsonl').read_text().splitlines()
    assert lines('run') == lines('full') and len(lines('full')) == 3
