"""The human review of a query build (issue 23), on a real build folder made through the real `openai:` backend against a
loopback chat server: notes and reviewer ids survive the decisions file into the reviewed query file, edited queries
lose their old rephrasings and are verified and rephrased again (requests counted), a second reviewer's sample and
Cohen's kappa (checked against scikit-learn), the dataset card, the sheet's own CSV download in a real browser, and
the `docbench queries` review sub-commands."""
import argparse, contextlib, html, io, json, re, shutil, subprocess
from pathlib import Path
import pytest

from docbench_nb.demo import demo_corpus_dir
from docbench_nb.latex.corpus import load_papers
from docbench_nb.llm import make_llm
from docbench_nb.testing import ScriptedChatServer
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.queries.evidence import read_query_records
from docbench_nb.queries.llm_stages import VERIFY, fenced_text
from docbench_nb.queries.build import build_queries
from docbench_nb.queries.card import CARD_FILE, REVIEW_AGREEMENT, dataset_card
from docbench_nb.queries.review import (add_review_commands, agreement, decisions_csv, import_review, read_decisions, review_sample,
                                        write_agreement)

pytestmark = pytest.mark.timeout(300)
CHROMIUM = next((shutil.which(c) for c in ('chromium', 'chromium-browser', 'google-chrome') if shutil.which(c)), None)


def reply(req):
    """A rule-based model for every stage, told apart by the JSON each prompt asks for: questions built from the evidence,
    rewrites that keep the question, a judge that rejects a question pointing at "the table", rephrasings that keep it."""
    sys_, user = req['messages'][0]['content'], req['messages'][-1]['content']
    user = user if isinstance(user, str) else ' '.join(p.get('text', '') for p in user if isinstance(p, dict))
    q = fenced_text(user, 'QUESTION') or fenced_text(user, 'ORIGINAL') or ''
    if '"same_meaning"' in user: return json.dumps({'same_meaning': True, 'same_answer': True})
    if '"valid"' in user:
        bad = 'the table' in q.lower()
        return json.dumps({'valid': not bad, 'labels': ['context_bound'] if bad else [], 'reason': 'points at a table' if bad else ''})
    if '"rephrasing"' in user: return json.dumps({'rephrasing': f'Put differently ({len(user)}): {q}'})
    if '"answers"' in user: return json.dumps({'answers': False})
    if '"match"' in user: return json.dumps({'match': True})
    if '"question"' in user:
        words = re.findall(r'[A-Za-z]{8,}', fenced_text(user, 'EVIDENCE') or '')[:2]
        return json.dumps({'question': f"Which investigation of {' and '.join(words) or 'meadows'} involved purple zebra meadows?", 'answer': 'zebras'})
    if '"answer"' in user: return json.dumps({'answer': 'zebras'})
    return json.dumps({'query': q})


@pytest.fixture(scope='module')
def build(tmp_path_factory):
    "A real build folder (6 demo papers, one evidence item per paper and type) made through the loopback server; the server stays up."
    tmp = tmp_path_factory.mktemp('review')
    papers, _ = load_papers(demo_corpus_dir(), cache_dir=tmp / 'c', progress=False)
    with ScriptedChatServer(default=reply) as srv:
        llm, judge = make_llm(f'openai:gen@{srv.base_url}', cache_dir=tmp / 'c'), make_llm(f'openai:judge@{srv.base_url}', cache_dir=tmp / 'c')
        res = build_queries(None, llm, tmp / 'out', per_paper=1, bm25_k=0, papers=papers[:6], cache_dir=tmp / 'c', judge=judge)
        assert res['n_queries'] >= 8, res['attrition']['summary']
        yield {'dir': tmp / 'out', 'srv': srv, 'llm': llm, 'judge': judge, 'tmp': tmp,
               'ids': [d.id for d in read_query_records(tmp / 'out' / 'queries.jsonl')]}


def _reviewer_a(ids, path):
    "Reviewer ana: drops the first query (with a note), edits the next two (one into a question the judge rejects), keeps the rest."
    rows = [(ids[0], 'drop', '', '=not about zebras; asks "what" twice', 'ana'),
            (ids[1], 'edit', 'Which investigation of purple zebra meadows measured their extent in detail?', 'sharper', 'ana'),
            (ids[2], 'edit', 'What does the table say about purple zebra meadows?', '', 'ana')]
    rows += [(q, 'keep', '', 'fine' if i % 2 else '', 'ana') for i, q in enumerate(ids[3:])]
    Path(path).write_text(decisions_csv(rows), encoding='utf-8')
    return path


def test_notes_and_reviewer_survive_and_edits_wait_for_a_model(build, tmp_path):
    out, ids = build['dir'], build['ids']
    before = {d.id: d for d in read_query_records(out / 'queries.jsonl')}
    n0 = build['srv'].n_calls
    s = import_review(out / 'queries.jsonl', _reviewer_a(ids, tmp_path / 'a.csv'), tmp_path / 'final.jsonl')
    assert build['srv'].n_calls == n0                                    # no model given: nothing asked
    assert (s['keep'], s['edit'], s['drop'], s['reviewers'], s['needs_rephrase']) == (len(ids) - 3, 2, 1, {'ana': len(ids)}, 2)
    assert s['notes'] == 2 + (len(ids) - 3) // 2
    lines = {l['id']: l for l in map(json.loads, (tmp_path / 'final.jsonl').read_text().splitlines())}
    assert ids[0] not in lines and set(lines) == set(ids[1:])
    assert lines[ids[1]]['review'] == {'decision': 'edit', 'reviewer': 'ana', 'note': 'sharper'}
    assert lines[ids[1]]['rephrasings'] == [] and lines[ids[1]]['flags'][-2:] == ['edited', 'needs_rephrase']
    assert lines[ids[4]]['review'] == {'decision': 'keep', 'reviewer': 'ana', 'note': 'fine'}
    assert lines[ids[4]]['rephrasings'] == before[ids[4]].rephrasings and len(before[ids[4]].rephrasings) == 3
    orig = {l['id']: l for l in map(json.loads, (out / 'queries.jsonl').read_text().splitlines())}
    assert all(lines[q][k] == v for q in ids[3:] for k, v in orig[q].items())   # every key of the build's line written back
    # the dropped query's note (formula-neutralised in the CSV, restored on reading) is in the records file
    recs = [json.loads(l) for l in Path(s['records_file']).read_text().splitlines()]
    drop = next(r for r in recs if r['item_id'] == ids[0])
    assert drop['dropped'] and drop['input']['note'] == '=not about zebras; asks "what" twice' and drop['input']['reviewer'] == 'ana'
    # the evaluation's reader: the review rides in Query.meta, and an edited query has level 0 only
    qs = load_queries(tmp_path / 'final.jsonl', levels=(0, 1, 2, 3))
    assert [q.level for q in qs if q.group_id == ids[1]] == [0] and len([q for q in qs if q.group_id == ids[4]]) == 4
    assert next(q for q in qs if q.id == ids[1]).meta['review']['note'] == 'sharper'


def test_edits_are_verified_and_rephrased_again_counting_requests(build, tmp_path):
    out, ids, srv = build['dir'], build['ids'], build['srv']
    before = {d.id: d for d in read_query_records(out / 'queries.jsonl')}
    evidence = {json.loads(l)['id']: json.loads(l) for l in (out / 'evidence.jsonl').read_text().splitlines()}
    dec = _reviewer_a(ids, tmp_path / 'a.csv')
    n0, k0 = srv.n_calls, len(srv.requests)
    s = import_review(out / 'queries.jsonl', dec, tmp_path / 'final.jsonl', llm=build['llm'], judge=build['judge'], card_dir=False)
    # two edits verified (2 requests); the one that passes is rephrased at three levels, each checked (6 requests)
    assert srv.n_calls - n0 == 2 + 6
    rc = s['recheck']
    assert (rc['n'], rc['rephrased'], [x['id'] for x in rc['verify_failed']]) == (2, 1, [ids[2]])
    assert rc['verify_failed'][0]['reason'].startswith('verification failed: context_bound')
    sent = [r['json']['messages'] for r in srv.requests[k0:]]
    verify = [m for m in sent if '"valid"' in m[-1]['content']]
    assert len(verify) == 2 and all(m[0]['content'].startswith(VERIFY.system) for m in verify)
    # the judge read the whole evidence from the build's evidence.jsonl, not the stored excerpt
    for q in ids[1:3]:
        m = next(m for m in verify if fenced_text(m[-1]['content'], 'QUESTION') != before[q].query and
                 fenced_text(m[-1]['content'], 'EVIDENCE').strip() == evidence[before[q].evidence_id]['text'].strip())
        assert len(fenced_text(m[-1]['content'], 'EVIDENCE')) > len(before[q].evidence_excerpt)
    final = {d.id: d for d in read_query_records(tmp_path / 'final.jsonl')}
    assert set(final) == set(ids[3:]) | {ids[1]}                       # dropped by the reviewer, and by the judge
    e = final[ids[1]]
    assert e.query.startswith('Which investigation of purple zebra meadows measured')
    assert len(e.rephrasings) == 3 and all(e.query in r for r in e.rephrasings) and 'needs_rephrase' not in e.flags and 'edited' in e.flags
    assert final[ids[4]].rephrasings == before[ids[4]].rephrasings     # untouched queries keep theirs
    # again: every reply from the backend's cache
    n1 = srv.n_calls
    s2 = import_review(out / 'queries.jsonl', dec, tmp_path / 'again.jsonl', llm=build['llm'], judge=build['judge'], card_dir=False)
    assert srv.n_calls == n1 and (tmp_path / 'again.jsonl').read_text() == (tmp_path / 'final.jsonl').read_text()
    # a review imported without a model first, then the reviewed file with an empty decisions file and a model:
    # the pending edit is picked up and the first review (decision, reviewer, note) is kept
    import_review(out / 'queries.jsonl', dec, out / 'pending.jsonl', card_dir=False)
    (tmp_path / 'none.csv').write_text('id,decision\n')
    s3 = import_review(out / 'pending.jsonl', tmp_path / 'none.csv', tmp_path / 'later.jsonl', llm=build['llm'], judge=build['judge'],
                       on_verify_fail='keep', card_dir=False)
    assert srv.n_calls - n1 == 6                                         # verify cached; the rejected edit is kept and rephrased
    later = {l['id']: l for l in map(json.loads, (tmp_path / 'later.jsonl').read_text().splitlines())}
    assert later[ids[1]]['review'] == {'decision': 'edit', 'reviewer': 'ana', 'note': 'sharper'}
    assert 'reverify_failed' in later[ids[2]]['flags'] and len(later[ids[2]]['rephrasings']) == 3
    assert s3['needs_rephrase'] == 0 and s3['undecided'] == len(ids) - 1
    (out / 'pending.jsonl').unlink(); Path(str(out / 'pending.jsonl') + '.records.jsonl').unlink()


def test_second_reviewer_kappa_and_the_dataset_card(build, tmp_path):
    out, ids = build['dir'], build['ids']
    a = read_decisions(_reviewer_a(ids, out / 'decisions_ana.csv'))
    s = import_review(out / 'queries.jsonl', out / 'decisions_ana.csv', out / 'final.jsonl')
    assert s['card'] == str(out / CARD_FILE) and (out / 'review.json').is_file()
    smp = review_sample(out / 'queries.jsonl', 8, seed=3)
    assert len(smp['ids']) == 8 and set(smp['ids']) <= set(ids) and Path(smp['sheet']).is_file()
    assert smp['ids'] == review_sample(out / 'queries.jsonl', 8, seed=3, out_dir=tmp_path / 'x')['ids']
    # reviewer bo: keeps what ana edited, drops what ana dropped, and drops two queries ana kept
    kept_by_a = [q for q in smp['ids'] if a[q][0] == 'keep']
    b_dec = {q: ('keep' if a[q][0] == 'edit' else 'drop' if a[q][0] == 'drop' or q in kept_by_a[:2] else 'keep') for q in smp['ids']}
    Path(smp['decisions']).write_text(decisions_csv([(q, b_dec[q], '', 'unsure' if b_dec[q] == 'drop' else '', 'bo') for q in smp['ids']]))
    res = agreement(out / 'decisions_ana.csv', smp['decisions'])
    assert res['n'] == 8 and res['reviewers'] == {'a': ['ana'], 'b': ['bo']} and res['only_b'] == 0
    conf = res['confusion']
    assert sum(map(sum, (r.values() for r in conf.values()))) == 8
    for x in ('keep', 'edit', 'drop'):
        for y in ('keep', 'edit', 'drop'):
            assert conf[x][y] == sum(a[q][0] == x and b_dec[q] == y for q in smp['ids'])
    assert {d['id'] for d in res['disagreements']} == {q for q in smp['ids'] if a[q][0] != b_dec[q]}
    assert res['observed'] == round(sum(conf[x][x] for x in conf) / 8, 4)
    try: from sklearn.metrics import cohen_kappa_score
    except ImportError: cohen_kappa_score = None
    if cohen_kappa_score is not None:
        ref = cohen_kappa_score([a[q][0] for q in smp['ids']], [b_dec[q] for q in smp['ids']], labels=['keep', 'edit', 'drop'])
        assert res['kappa'] == pytest.approx(ref, abs=1e-4)
    with pytest.raises(ValueError, match=r"both decision files are by reviewer\(s\) \['ana'\]"):
        agreement(out / 'decisions_ana.csv', out / 'decisions_ana.csv')
    write_agreement(res, out)
    card = (out / CARD_FILE).read_text()
    assert card == dataset_card(out)
    att = json.loads((out / 'attrition.json').read_text())
    for want in (f"| generator | `openai:gen` | `{att['models']['generator']['fingerprint']}` |",
                 f"| judge | `openai:judge` | `{att['models']['judge']['fingerprint']}` |",
                 f"| `verify` | {VERIFY.version} | `{VERIFY.text_key}` |",
                 'BM25 difficulty filter: k = 0',
                 f"| candidates | " + ' | '.join(str(att['counts'][att['ran'][0]][t]['in']) for t in att['types']),
                 f"| false_negative | " + ' | '.join(str(att['counts']['false_negative'][t]['out']) for t in att['types']),
                 f"keep {len(ids) - 3}, edit 2, drop 1", 'Reviewers: ana', "Second reviewer's sample: 8 of",
                 f"Cohen's κ = {res['kappa']:.3f} on 8 queries decided by both (A: ana; B: bo)",
                 'Not run (build without `--calibrate`'):
        assert want in card, want
    assert json.loads((out / REVIEW_AGREEMENT).read_text())['kappa'] == res['kappa']


def test_review_subcommands(build, tmp_path):
    ap = argparse.ArgumentParser()
    qs = ap.add_subparsers(dest='cmd').add_parser('queries').add_subparsers(dest='queries_cmd')
    add_review_commands(qs)
    run = lambda *a: (lambda ns: ns.fn(ns))(ap.parse_args(['queries', *map(str, a)]))
    out, ids = build['dir'], build['ids']
    b = tmp_path / 'b'; shutil.copytree(out, b, ignore=shutil.ignore_patterns('stages', 'review*.json', 'second_review', CARD_FILE))
    with contextlib.redirect_stdout(io.StringIO()) as so, contextlib.redirect_stderr(io.StringIO()) as se:
        assert run('import-review', '--queries', b / 'queries.jsonl', '--decisions', _reviewer_a(ids, tmp_path / 'a.csv'), '--out', b / 'final.jsonl') == 0
        assert run('review-sample', '--queries', b / 'queries.jsonl', '--n', 5, '--seed', 1) == 0
        smp = json.loads((b / 'second_review' / 'sample.json').read_text())
        (b / 'second_review' / 'decisions.csv').write_text(decisions_csv([(q, 'keep', '', '') for q in smp['ids']]))
        assert run('agreement', '--a', tmp_path / 'a.csv', '--b', b / 'second_review' / 'decisions.csv', '--reviewer-b', 'bo',
                   '--out', tmp_path / 'k.json', '--card-dir', b) == 0
        assert run('card', '--dir', b) == 0
    assert '2 edited queries keep level 0 only (flagged needs_rephrase); rerun with --llm' in se.getvalue()
    assert "Cohen's κ = " in so.getvalue() and '| A \\ B | keep | edit | drop | total |' in so.getvalue()
    k = json.loads((tmp_path / 'k.json').read_text())
    assert k['n'] == 5 and k['reviewers']['b'] == ['bo']
    card = (b / CARD_FILE).read_text()
    assert 'Second reviewer\'s sample: 5 of' in card and 'Reviewers: ana' in card and '2 edited queries have level 0 only' in card



def test_import_review_recheck_sends_and_records_a_prompts_folder(build, tmp_path, capsys):
    """`import-review --llm` with `--prompts` and `--language`: the re-check sends the folder's text, `review.json` and the
    card record the hash of each prompt sent; a folder lacking a re-check prompt is refused by name before any request."""
    from docbench_nb.cli import main
    from docbench_nb.queries.llm_stages import load_prompts, stage_prompts, write_prompts
    out, ids, srv = build['dir'], build['ids'], build['srv']
    b = tmp_path / 'b'; shutil.copytree(out, b, ignore=shutil.ignore_patterns('stages', 'review*.json', 'second_review', CARD_FILE))
    folder = tmp_path / 'prompts'; write_prompts(folder)
    r1 = folder / 'rephrase_1.txt'
    r1.write_text(r1.read_text().replace('Make minor changes', 'Make minor changes, as a notary would'))
    dec = _reviewer_a(ids, tmp_path / 'a.csv')
    cli = lambda *a: main(['-q', '--cache-dir', str(tmp_path / 'cache'), 'queries', 'import-review', '--queries', str(b / 'queries.jsonl'),
                           '--decisions', str(dec), '--llm', f'openai:gen@{srv.base_url}', '--judge', f'openai:judge@{srv.base_url}', *map(str, a)])
    k0 = len(srv.requests)
    assert cli('--out', b / 'rechecked.jsonl', '--prompts', folder, '--language', 'French') == 0
    sent = [r['json']['messages'] for r in srv.requests[k0:]]
    reph = [m for m in sent if '"rephrasing"' in m[-1]['content']]
    assert len(sent) == 2 + 6 and len(reph) == 3 and all('Write in French.' in m[0]['content'] for m in reph)
    assert sum('as a notary would' in m[-1]['content'] for m in reph) == 1            # level 1 of the one edit that passed
    want = load_prompts(folder, language='French')
    rc = json.loads((b / 'review.json').read_text())['recheck']
    assert {n: h['hash'] for n, h in rc['prompts'].items()} == {n: want[n].text_key for n in stage_prompts('verify', 'rephrase')}
    assert (rc['language'], rc['prompts_dir']) == ('French', str(folder.resolve()))
    card = (b / CARD_FILE).read_text()
    assert 'Re-check prompts (scientific paper, French, from' in card and want['rephrase_1'].text_key in card
    (folder / 'rephrase_check.txt').unlink()
    n = srv.n_calls; capsys.readouterr()
    assert cli('--out', b / 'again.jsonl', '--prompts', folder) != 0
    assert 'rephrase_check.txt is missing' in capsys.readouterr().err and srv.n_calls == n and not (b / 'again.jsonl').exists()

@pytest.mark.skipif(CHROMIUM is None, reason='chromium not installed')
def test_sheet_download_keeps_note_and_reviewer_in_a_browser(build, tmp_path):
    "The second reviewer's sheet in headless Chromium: no download without a reviewer id or with an undecided card; then the CSV reads back."
    smp = review_sample(build['dir'] / 'queries.jsonl', 2, seed=0, out_dir=tmp_path / 's')
    page = Path(smp['sheet']).read_text()
    script = ("<script>const said=[];window.alert=m=>said.push(m);window.addEventListener('load',()=>{const got=[String(decisions())];"
              "document.getElementById('reviewer').value='ana';got.push(String(decisions()));const cs=document.querySelectorAll('section.card');"
              "cs[0].querySelector('input[value=drop]').checked=true;cs[0].querySelector('textarea.note').value='=not grounded, \"quoted\"\\nsee p. 2';"
              "cs[1].querySelector('input[value=edit]').checked=true;cs[1].querySelector('textarea.edit').value='A sharper question?';"
              "const p=document.createElement('pre');p.id='out';p.textContent=JSON.stringify({got,said,csv:decisions()});document.body.appendChild(p);});</script>")
    (tmp_path / 'probe.html').write_text(page.replace('</body>', script + '</body>'))
    r = subprocess.run([CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--virtual-time-budget=5000',
                        '--dump-dom', (tmp_path / 'probe.html').as_uri()], capture_output=True, text=True, timeout=120)
    res = json.loads(html.unescape(re.search(r'<pre id="out">(.*?)</pre>', r.stdout, re.S).group(1)))
    assert res['got'] == ['null', 'null']
    assert 'reviewer id' in res['said'][0] and res['said'][1].startswith('2 card(s) without a decision')
    (tmp_path / 'd.csv').write_text(res['csv'])
    d = read_decisions(tmp_path / 'd.csv')
    q0, q1 = smp['ids']
    assert d[q0] == ('drop', '', 2) and d[q0].note == '=not grounded, "quoted"\nsee p. 2' and d[q0].reviewer == 'ana'
    assert d[q1] == ('edit', 'A sharper question?', 4)                   # the note above spans two lines and d[q1].reviewer == 'ana' and d[q1].note == ''
