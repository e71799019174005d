"""Prompts from a folder, with domain and language, through the CLI against a loopback chat server: what is sent is what
the folder says, a folder lacking a template the build needs is refused by name before any call, and stage keys hash
the prompt text (an edited prompt is asked again on resume; the stages before it are reused)."""
import json, shutil
import pytest

from docbench_nb.cli import main
from docbench_nb.demo import demo_corpus_dir
from docbench_nb.llm import make_llm
from docbench_nb.testing import ScriptedChatServer
from docbench_nb.queries.llm_stages import PROMPT_TEMPLATES, NATURALIZE, fenced_text, load_prompts, PromptsError

PAPERS = ('bat-activity-streetlights', 'clinical-abbrev-rap', 'coiled-metamaterial-absorber')

from scripted_pipeline import reply             # the one scripted model of the pipeline tests

@pytest.fixture
def corpus(tmp_path):
    c = tmp_path / 'corpus'
    for p in PAPERS: shutil.copytree(demo_corpus_dir() / p, c / p)
    return c

def test_prompts_folder_domain_language_and_stage_keys(corpus, tmp_path, capsys):
    folder = tmp_path / 'prompts'
    assert main(['-q', 'queries', 'prompts', '--out', str(folder)]) == 0
    assert sorted(p.stem for p in folder.glob('*.txt')) == sorted(PROMPT_TEMPLATES)
    nat = folder / 'naturalize.txt'
    assert 'a scientist would ask' in nat.read_text()
    nat.write_text(nat.read_text().replace('a scientist would ask', 'a jurist would ask'))
    with ScriptedChatServer(default=reply) as srv:
        def build(out, *extra):
            return main(['-q', '--cache-dir', str(tmp_path / 'cache'), 'queries', 'build', '--corpus', str(corpus), '--llm',
                         f'openai:scripted@{srv.base_url}?concurrency=2&max_retries=0', '--types', 'text', '--per-paper', '1',
                         '--bm25-k', '0', '--top-n', '1', '--out', str(tmp_path / out), *extra])
        args = ('--prompts', str(folder), '--domain', 'court ruling', '--language', 'German')
        assert build('run', *args) == 0
        sent = [r['json']['messages'] for r in srv.requests]
        gen = [m for m in sent if 'You write search questions' in m[0]['content']]
        assert len(gen) == 3 and all('benchmark of court ruling retrieval. Write in German.' in m[0]['content'] and
                                     m[1]['content'].startswith('Here is a passage from a court ruling.') for m in gen)
        natz = [m for m in sent if 'search engine' in m[0]['content']]
        assert natz and all('a jurist would ask' in m[1]['content'] and 'Write in German.' in m[0]['content'] for m in natz)
        att = json.loads((tmp_path / 'run' / 'attrition.json').read_text())
        assert (att['settings']['domain'], att['settings']['language']) == ('court ruling', 'German')
        assert att['prompts']['naturalize']['hash'] != NATURALIZE.text_key                   # the card names the prompt sent
        card = (tmp_path / 'run' / 'dataset_card.md').read_text()
        assert att['prompts']['naturalize']['hash'] in card and '- domain: "court ruling"' in card and '- language: "German"' in card
        n = srv.n_calls
        # resume with one prompt edited (its version string unchanged): only that stage and those after it are asked
        # again — the stage store and the LLM cache both key on the text sent
        nat.write_text(nat.read_text().replace('a jurist would ask', 'a judge would ask'))
        assert build('run', *args) == 0
        again = [r['json']['messages'] for r in srv.requests[n:]]
        assert again and not any('You write search questions' in m[0]['content'] or 'stand on their own' in m[0]['content']
                                 or 'You check' in m[0]['content'] for m in again)
        assert sum('a judge would ask' in m[1]['content'] for m in again) == len(natz)
        # a folder that lacks a template the build needs is refused by name, before any call
        (folder / 'verify.txt').unlink()
        n = srv.n_calls
        capsys.readouterr()
        assert build('run2', *args) != 0 and 'verify.txt is missing' in capsys.readouterr().err
        assert srv.n_calls == n and not (tmp_path / 'run2' / 'evidence.jsonl').exists()

def test_prompt_templates_are_checked(tmp_path):
    from docbench_nb.queries.llm_stages import write_prompts
    write_prompts(tmp_path)
    v = tmp_path / 'verify.txt'
    v.write_text(v.read_text().replace('{evidence}', ''))
    with pytest.raises(PromptsError, match=r'verify\.txt: the user template lacks \{evidence\}'): load_prompts(tmp_path)
    v.write_text('no sections at all')
    with pytest.raises(PromptsError, match=r"verify\.txt: expected a '=== system ===' line"): load_prompts(tmp_path)
    v.unlink(); (tmp_path / 'verfy.txt').write_text('x')
    with pytest.raises(PromptsError, match=r'verfy\.txt names no prompt'): load_prompts(tmp_path)


def test_two_builds_in_two_threads_send_their_own_prompts(tmp_path):
    """Two builds at once in one process, each with its own prompt folder and language: every request carries its own
    build's text — also the rephrasings, asked from the stage's worker threads (concurrency 2) — and each card its own hashes."""
    import threading
    from docbench_nb.latex.corpus import load_papers
    from docbench_nb.queries.build import build_queries
    ps, errors = load_papers([demo_corpus_dir() / p for p in PAPERS[:2]], cache_dir=tmp_path / 'papers', progress=False)
    assert len(ps) == 2, errors
    runs = {'A': ('German', 'a jurist would ask'), 'B': ('French', 'a chemist would ask')}
    from docbench_nb.queries.llm_stages import write_prompts
    for who, (_, phrase) in runs.items():
        write_prompts(tmp_path / f'p{who}')
        nat = tmp_path / f'p{who}' / 'naturalize.txt'
        nat.write_text(nat.read_text().replace('a scientist would ask', phrase))
    # the corpus index's tokenizer loaded once first: two threads importing transformers for the first time at once can
    # fail inside transformers' lazy module (an ImportError unrelated to prompts)
    from docbench_nb.retrieval.chunking import default_tokenizer
    default_tokenizer()
    gate, seen, lock = threading.Barrier(2, timeout=60), set(), threading.Lock()
    def answer(req):                  # each build's first request waits for the other's: both builds are under way at once
        with lock: first = req['model'] not in seen; seen.add(req['model'])
        if first: gate.wait()
        return reply(req)
    with ScriptedChatServer(default=answer) as srv:
        res, errs = {}, []
        def build(who):
            try:
                llm = make_llm(f'openai:model{who}@{srv.base_url}?concurrency=2&max_retries=0', cache_dir=tmp_path / f'llm{who}')
                res[who] = build_queries(None, llm, tmp_path / f'out{who}', types=('text',), per_paper=1, bm25_k=0, papers=ps, top_n=1,
                                         cache_dir=tmp_path / f'c{who}', prompts=tmp_path / f'p{who}', language=runs[who][0])
            except Exception as e: errs.append(e)
        ts = [threading.Thread(target=build, args=(w,)) for w in runs]
        for t in ts: t.start()
        for t in ts: t.join()
        assert not errs, errs
        by = {w: [r['json'] for r in srv.requests if r['json']['model'] == f'model{w}'] for w in runs}
    for who, (lang, phrase) in runs.items():
        other_lang, other_phrase = next(v for w, v in runs.items() if w != who)
        sys_ = [m['messages'][0]['content'] for m in by[who]]
        reph = [s for s in sys_ if 'You rephrase' in s]
        nat = [m['messages'][1]['content'] for m in by[who] if 'search engine' in m['messages'][0]['content']]
        assert len(reph) == 2 * 3 and all(f'Write in {lang}.' in s for s in reph)                 # from the worker threads
        assert sum(f'Write in {lang}.' in s for s in sys_) == 2 * (1 + 1 + 1 + 3)                 # generate, decontextualize, naturalize, rephrase
        assert not any(f'Write in {other_lang}.' in s or 'Write in English.' in s for s in sys_)
        assert len(nat) == 2 and all(phrase in u for u in nat) and not any(other_phrase in m['messages'][1]['content'] for m in by[who])
        att = json.loads((tmp_path / f'out{who}' / 'attrition.json').read_text())
        want = load_prompts(tmp_path / f'p{who}', language=lang)
        assert {n: h['hash'] for n, h in att['prompts'].items()} == {n: p.text_key for n, p in want.items()}
        assert att['settings']['language'] == lang
    assert len(by['A']) == len(by['B']) >= 2 * (4 + 6) and res['A']['n_queries'] == res['B']['n_queries'] == 2


def test_every_model_command_takes_a_prompts_folder(tmp_path, capsys):
    """`rephrase` and `calibrate` send an edited folder's text and report its hashes; `rephrase`, `check-fn`, `calibrate` and
    `import-review --llm` refuse a folder that lacks a prompt they send, by name, before any request."""
    from docbench_nb.queries.evidence import Draft, write_query_records
    from docbench_nb.queries.llm_stages import write_prompts
    folder = tmp_path / 'prompts'
    write_prompts(folder)
    r2 = folder / 'rephrase_2.txt'
    r2.write_text(r2.read_text().replace('Use new wording', 'Use new wording, as a notary would,'))
    v = folder / 'verify.txt'
    v.write_text(v.read_text().replace('You check benchmark questions', 'You check benchmark questions strictly'))
    qf = tmp_path / 'q.jsonl'
    write_query_records([Draft(f'q{i}', 'p', 'text', query=f'Which survey of {w} bats counted passes under LED streetlights?', answer='one')
                         for i, w in enumerate(('pipistrelle', 'myotis'))], qf)
    sent = load_prompts(folder, domain='court ruling', language='German')
    with ScriptedChatServer(default=reply) as srv:
        url = f'openai:scripted@{srv.base_url}?max_retries=0'
        cli = lambda *a: main(['--cache-dir', str(tmp_path / 'cache'), 'queries', *map(str, a)])
        opts = ('--prompts', folder, '--domain', 'court ruling', '--language', 'German')
        capsys.readouterr()
        assert cli('rephrase', '--queries', qf, '--llm', url, '--out', tmp_path / 'r.jsonl', *opts) == 0
        s = json.loads(capsys.readouterr().out)
        assert srv.n_calls == 2 * 6
        reph = [r['json']['messages'] for r in srv.requests if 'You rephrase' in r['json']['messages'][0]['content']]
        assert len(reph) == 6 and all('Write in German.' in m[0]['content'] for m in reph)
        assert sum('as a notary would' in m[1]['content'] for m in reph) == 2                  # level 2 of each query
        assert {n: h['hash'] for n, h in s['prompts'].items()} == {n: sent[n].text_key for n in ('rephrase_1', 'rephrase_2', 'rephrase_3', 'rephrase_check')}
        assert (s['domain'], s['language'], s['prompts_dir']) == ('court ruling', 'German', str(folder.resolve()))
        n = srv.n_calls
        assert cli('calibrate', '--llm', url, '--stages', 'verify', '--per-class', '1', '--no-injected', '--out', tmp_path / 'cal.md', *opts) == 0
        ver = [r['json']['messages'] for r in srv.requests[n:]]
        assert len(ver) == 8 and all(m[0]['content'].startswith('You check benchmark questions strictly for court ruling retrieval.') for m in ver)
        md = (tmp_path / 'cal.md').read_text()
        assert f"verify `{sent['verify'].text_key}`" in md and f'--prompts {folder}' in md and "--domain 'court ruling'" in md
        # a folder that lacks a prompt the command sends: refused by name, nothing asked, nothing written
        dec = tmp_path / 'dec.csv'; dec.write_text('id,decision,edited_query\nq0,edit,Which bats were counted?\n')
        refusals = {'rephrase_check': ('rephrase', '--queries', qf, '--llm', url, '--out', tmp_path / 'x1.jsonl'),
                    'false_negative': ('check-fn', '--corpus', tmp_path / 'nowhere', '--queries', qf, '--llm', url, '--out', tmp_path / 'x2.jsonl'),
                    'verify': ('calibrate', '--llm', url, '--stages', 'verify', '--out', tmp_path / 'x3.md'),
                    'rephrase_3': ('import-review', '--queries', qf, '--decisions', dec, '--llm', url, '--out', tmp_path / 'x4.jsonl')}
        for missing, cmd in refusals.items():
            part = tmp_path / f'without_{missing}'
            write_prompts(part, [p for p in PROMPT_TEMPLATES if p != missing])
            n = srv.n_calls
            assert cli(*cmd, '--prompts', part) != 0
            assert f'{missing}.txt is missing' in capsys.readouterr().err and srv.n_calls == n, missing
        assert not any((tmp_path / f).exists() for f in ('x1.jsonl', 'x2.jsonl', 'x3.md', 'x4.jsonl'))
        # without --llm, import-review sends nothing: a folder lacking the re-check's prompts is no reason to refuse
        assert cli('import-review', '--queries', qf, '--decisions', dec, '--out', tmp_path / 'x5.jsonl', '--prompts', tmp_path / 'without_verify') == 0
