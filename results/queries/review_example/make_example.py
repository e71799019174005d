"""Worked example of the review round trip (issue 23): a query build over six demo papers through the real `openai:`
backend against a loopback chat server that answers by rules (so the queries are template questions, not a model's),
reviewer A's decisions with notes and edits, the edits verified and rephrased again, a second reviewer's sample,
Cohen's kappa and the dataset card. Both reviewers are scripted: the numbers illustrate the mechanics, they are not a
measured human agreement.

    .venv/bin/python results/queries/review_example/make_example.py
"""
import json, re, shutil, sys, tempfile
from pathlib import Path
from docbench_nb.demo import demo_corpus_dir
from docbench_nb.latex.corpus import load_papers
from docbench_nb.llm import make_llm
from docbench_nb.testing import ScriptedChatServer
from docbench_nb.queries.llm_stages import fenced_text
from docbench_nb.queries.build import build_queries
from docbench_nb.queries.evidence import read_query_records
from docbench_nb.queries.card import CARD_FILE, agreement_table
from docbench_nb.queries.review import agreement, decisions_csv, import_review, read_decisions, review_sample, write_agreement

HERE = Path(__file__).parent


def reply(req):
    "Rules per stage (told apart by the JSON the prompt asks for); the judge rejects a question that points at 'the table'."
    user = req['messages'][-1]['content']
    user = user if isinstance(user, str) else ' '.join(p.get('text', '') for p in user if isinstance(p, dict))
    q = fenced_text(user, 'QUESTION') or fenced_text(user, 'ORIGINAL') or ''
    if '"same_meaning"' in user: return json.dumps({'same_meaning': True, 'same_answer': True})
    if '"valid"' in user:
        bad = 'the table' in q.lower()
        return json.dumps({'valid': not bad, 'labels': ['context_bound'] if bad else []})
    if '"rephrasing"' in user: return json.dumps({'rephrasing': f'Put differently ({len(user)}): {q}'})
    if '"answers"' in user: return json.dumps({'answers': False})
    if '"question"' in user:
        words = re.findall(r'[A-Za-z]{8,}', fenced_text(user, 'EVIDENCE') or '')[:2]
        return json.dumps({'question': f"Which study of {' and '.join(words) or 'this'} reports the effect on its main outcome?", 'answer': 'an effect'})
    if '"answer"' in user: return json.dumps({'answer': 'an effect'})
    return json.dumps({'query': q})


def main():
    tmp = Path(tempfile.mkdtemp())
    out = tmp / 'build'
    papers, _ = load_papers(demo_corpus_dir(), cache_dir=tmp / 'c', progress=False)
    with ScriptedChatServer(default=reply) as srv:
        llm, judge = make_llm(f'openai:rules-gen@{srv.base_url}', cache_dir=tmp / 'c'), make_llm(f'openai:rules-judge@{srv.base_url}', cache_dir=tmp / 'c')
        res = build_queries(None, llm, out, per_paper=1, bm25_k=0, papers=papers[:6], cache_dir=tmp / 'c', judge=judge, calibration=True)
        ids = [d.id for d in read_query_records(out / 'queries.jsonl')]
        print(f"build: {res['n_queries']} queries, {srv.n_calls} requests (calibration included)", file=sys.stderr)
        # reviewer A (ana): drops two tables' questions as too generic, edits two (one into a question pointing at "the table")
        rows = [(ids[1], 'drop', '', 'generic: any paper with a table could answer it', 'ana'),
                (ids[4], 'drop', '', 'generic', 'ana'),
                (ids[0], 'edit', 'Which study of streetlight conversion to LEDs reports the effect on bat activity by guild?', 'names the setting', 'ana'),
                (ids[3], 'edit', 'What does the table report about the abbreviation effect?', 'tried to be specific', 'ana')]
        rows += [(q, 'keep', '', '', 'ana') for q in ids if q not in {r[0] for r in rows}]
        (out / 'decisions_ana.csv').write_text(decisions_csv(rows))
        n0 = srv.n_calls
        s = import_review(out / 'queries.jsonl', out / 'decisions_ana.csv', out / 'final.jsonl', llm=llm, judge=judge)
        print(f"import-review: {s['n_out']} of {s['n_in']} kept; edits re-checked with {srv.n_calls - n0} requests: {s['recheck']}", file=sys.stderr)
        # reviewer B (bo) on a seeded sample of 8: agrees except that they keep one of A's drops and drop one of A's keeps
        smp = review_sample(out / 'queries.jsonl', 8, seed=1)
        a = read_decisions(out / 'decisions_ana.csv')
        flip_keep = next(q for q in smp['ids'] if a[q][0] == 'keep')
        b = [(q, 'drop' if q == flip_keep else 'keep' if a[q][0] == 'drop' and q != ids[4] else a[q][0],
              a[q][1] if a[q][0] == 'edit' else '', 'ungrounded answer' if q == flip_keep else '', 'bo') for q in smp['ids']]
        Path(smp['decisions']).write_text(decisions_csv(b))
        k = agreement(out / 'decisions_ana.csv', smp['decisions'])
        write_agreement(k, out)
        print(agreement_table(k))
    for f in (CARD_FILE, 'decisions_ana.csv', 'review_agreement.json'): shutil.copy(out / f, HERE / f)
    shutil.copy(out / 'second_review' / 'decisions.csv', HERE / 'decisions_bo.csv')
    shutil.copy(out / 'second_review' / 'sample.json', HERE / 'sample.json')
    (HERE / 'sample.json').write_text(json.dumps({k2: v for k2, v in json.loads((HERE / 'sample.json').read_text()).items() if k2 != 'queries_file'}, indent=1))
    print(f'written to {HERE}', file=sys.stderr)


if __name__ == '__main__': main()
