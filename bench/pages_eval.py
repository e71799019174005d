"""Paper-level vs page-level retrieval on the shared corpus and the dev queries (issue #11 part B).

    OMP_NUM_THREADS=1 python bench/pages_eval.py [--ocr-pages 300 | --ocr-papers ID,..] [--dense all|subset|none] [--out results/pages]

1. Page-level qrels for the dev queries (page map of every shared paper; placed / unplaced per evidence type and method).
2. nDCG@10 on the paper task and on the page task, same queries and retrievers, per evidence type:
   text chunks (max-pooled to pages on the page task), per-page LaTeX text (`page-latex`), BM25 over all 80 papers
   (dense MiniLM too with `--dense all`).
3. Pages through OCR (`pages` + `ocr:tesseract+bm25`, `ocr:tesseract+dense`) on a subset: the dev queries' papers
   with the fewest pages, up to `--ocr-pages` pages in all (OCR of all ~2,200 shared pages costs hours on one
   core); the text rows (BM25 and, by default, dense MiniLM) are repeated on the same subset, like for like.
4. The benchmark exported (`export.export_benchmark`), reloaded with `datasets`, re-imported and evaluated:
   per-query nDCG@10 equal to the page task's (page-latex + BM25 over all papers; pages + OCR + BM25 on the subset).

Writes `OUT/eval.json` and `OUT/eval.md` (helper A writes other files into results/pages/).
"""
import argparse, json, os, sys, tempfile, time
from pathlib import Path
os.environ.setdefault('OMP_NUM_THREADS', '1')
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from docbench_nb.evaluation.core import evaluate
from docbench_nb.latex.corpus import load_papers
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.evaluation.page_task import page_maps, page_queries
from docbench_nb.evaluation.core import evaluate_units
from docbench_nb.evaluation.export import export_benchmark, import_beir

SHARED = ROOT.parent / 'shared'
CORPUS, QUERIES = SHARED / 'corpus' / 'papers', SHARED / 'queries' / 'dev.jsonl'


def summary(res, qids=None):
    "nDCG@10 overall and per evidence type at level 0 (optionally on the query ids `qids` only), and n."
    rows = [r for r in res.per_query if r['level'] == 0 and (qids is None or r['query_id'] in qids)]
    mean = lambda xs: round(sum(xs) / len(xs), 4) if xs else None
    out = {'ndcg@10': mean([r['ndcg@10'] for r in rows]), 'n': len(rows)}
    for t in ('text', 'table', 'figure'):
        out[t] = mean([r['ndcg@10'] for r in rows if r['type'] == t])
    out['recall@10'] = mean([r['recall@10'] for r in rows])
    return out


def subset_queries(path, ids, out):
    "A query file with the records of `path` whose gold paper is in `ids`."
    lines = [l for l in open(path) if l.strip() and json.loads(l)['doc_id'] in ids]
    Path(out).write_text(''.join(lines)); return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=str(ROOT / 'results' / 'pages'))
    ap.add_argument('--ocr-pages', type=int, default=300, help='page budget of the OCR subset (0: no OCR rows)')
    ap.add_argument('--ocr-papers', default=None, help='comma-separated paper ids of the OCR subset (default: chosen by --ocr-pages)')
    ap.add_argument('--dense', default='subset', choices=['all', 'subset', 'none'],
                    help='where the dense MiniLM rows run (all: every paper; embedding all ~11k chunks takes long on one core)')
    ap.add_argument('--export-dir', default=None, help='where to export (default: a temporary folder)')
    ap.add_argument('--cache-dir', default=None)
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    t0, log = time.time(), (lambda *m: print(f'[{time.time() - t0:6.0f}s]', *m, flush=True))
    cache = a.cache_dir
    papers, errors = load_papers(CORPUS, cache_dir=cache, progress=False)
    log(f'{len(papers)} papers, {len(errors)} parse errors')
    maps = page_maps(papers, cache_dir=cache, progress=False)
    log('page maps:', {m: sum(x.method == m and not x.error for x in maps.values()) for m in ('synctex', 'pdftotext')},
        'errors', sum(bool(x.error) for x in maps.values()))
    qs = load_queries(QUERIES, known_doc_ids={p.id for p in papers})
    pqs, qrep = page_queries(qs, maps)
    base = [q for q in qs if q.level == 0]
    placed0 = {q.id for q in pqs if q.level == 0}
    by_type = {t: {'queries': sum(q.evidence_type == t for q in base), 'placed': sum(q.evidence_type == t and q.id in placed0 for q in base)}
               for t in ('text', 'table', 'figure')}
    R = {'argv': sys.argv[1:], 'corpus': str(CORPUS), 'queries': str(QUERIES), 'n_papers': len(papers), 'n_pages': sum(m.n_pages for m in maps.values() if not m.error),
         'map_methods': {m: sum(x.method == m and not x.error for x in maps.values()) for m in ('synctex', 'pdftotext')},
         'map_errors': {k: v.error for k, v in maps.items() if v.error},
         'page_qrels': {'level0_queries': len(base), 'level0_placed': len(placed0), 'by_type': by_type,
                        'unplaced_level0': {k: v for k, v in qrep['unplaced'].items() if '@L' not in k},
                        'methods_all_levels': qrep['methods'], 'pages_per_query': round(qrep['pages_per_query'], 3)},
         'rows': [], 'ocr_subset': None, 'roundtrip': {}}
    log('page qrels:', R['page_qrels']['level0_placed'], 'of', len(base), 'level-0 queries placed', by_type)

    def run(task, rep, ret, ps, qfile, tag):
        t = time.time()
        kw = dict(papers=ps, cache_dir=cache, progress=False)
        res = evaluate(tag, qfile, rep, ret, task=task, **({'maps': maps} if task == 'page' else {}), **kw)
        row = {'corpus': tag, 'task': task, 'representation': rep, 'retriever': ret, 'n_docs': res.n_docs, 'n_units': res.n_units,
               'n_queries_l0': sum(r['level'] == 0 for r in res.per_query), 'all': summary(res),
               'on_placed': summary(res, placed0), 'by_level': {l: round(v['ndcg@10'], 4) for l, v in res.by_level.items()},
               'seconds': round(time.time() - t, 1)}
        R['rows'].append(row)
        log(f"{tag} {task:5} {rep:10} {ret:22} nDCG@10 {row['on_placed']['ndcg@10']} (placed queries), {row['n_docs']} docs, {row['seconds']}s")
        json.dump(R, open(out / 'eval.json', 'w'), indent=1)
        return res

    rets = ['bm25'] + (['dense'] if a.dense == 'all' else [])
    full = {}
    for ret in rets:
        for rep in ('text', 'page-latex'):
            for task in ('paper', 'page'):
                full[(task, rep, ret)] = run(task, rep, ret, papers, QUERIES, 'all')

    if a.ocr_pages > 0:     # the OCR subset: dev-query papers, fewest pages first, within the page budget
        qpapers = sorted({q.doc_ids[0] for q in base}, key=lambda p: (maps[p].n_pages, p))
        sub, n = [], 0
        for pid in qpapers:
            if maps[pid].error or n + maps[pid].n_pages > a.ocr_pages: continue
            sub.append(pid); n += maps[pid].n_pages
        if a.ocr_papers:
            sub = [x for x in a.ocr_papers.split(',') if x]; n = sum(maps[x].n_pages for x in sub)
        sp = [p for p in papers if p.id in sub]
        qfile = subset_queries(QUERIES, set(sub), Path(tempfile.mkdtemp()) / 'dev_subset.jsonl')
        R['ocr_subset'] = {'papers': sub, 'n_papers': len(sub), 'n_pages': n, 'page_budget': a.ocr_pages, 'explicit': bool(a.ocr_papers)}
        log(f'OCR subset: {len(sub)} papers, {n} pages')
        dense = a.dense != 'none'
        ocr_rets = ['ocr:tesseract+bm25'] + (['ocr:tesseract+dense'] if dense else [])
        for task in ('paper', 'page'):
            for rep, ret in [('text', 'bm25'), ('page-latex', 'bm25'), ('pages', ocr_rets[0])] + \
                            ([('text', 'dense'), ('page-latex', 'dense'), ('pages', ocr_rets[1])] if dense else []):
                full[('sub', task, rep, ret)] = run(task, rep, ret, sp, qfile, 'subset')

    # the round trip: export, reload with `datasets`, re-import, evaluate
    import datasets
    ex = Path(a.export_dir or tempfile.mkdtemp(prefix='docbench-export-')) / 'all'
    t = time.time()
    s = export_benchmark(CORPUS, QUERIES, ex, papers=papers, maps=maps, cache_dir=cache, progress=False,
                         force=True)             # a rerun with the same --export-dir overwrites (the card lists only the new shards)
    R['roundtrip']['export'] = {k: v for k, v in s.items() if k not in ('unplaced', 'out')}
    R['roundtrip']['export']['seconds'] = round(time.time() - t, 1)
    R['roundtrip']['export']['bytes'] = sum(f.stat().st_size for f in ex.rglob('*') if f.is_file())
    loaded = {c: datasets.load_dataset(str(ex), c, split='test').num_rows for c in ('corpus', 'queries', 'qrels', 'papers', 'qrels-paper')}
    R['roundtrip']['datasets_rows'] = loaded
    log('exported', s['n_pages'], 'pages;', 'datasets rows', loaded)
    units, iq, info = import_beir(ex, cache_dir=cache, content='text')
    theirs = evaluate_units(units, iq, 'bm25', cache_dir=cache)
    mine = full[('page', 'page-latex', 'bm25')]
    pq_m, pq_t = ({r['query_id']: r['ndcg@10'] for r in x.per_query} for x in (mine, theirs))
    R['roundtrip']['page-latex|bm25'] = {'docbench': summary(mine), 'reimported': summary(theirs), 'n_queries': len(pq_t),
                                         'identical_per_query': pq_m == pq_t}
    log('round trip page-latex|bm25: identical per query:', pq_m == pq_t, summary(mine)['ndcg@10'], summary(theirs)['ndcg@10'])
    if a.ocr_pages > 0:
        exs = ex.parent / 'subset'
        export_benchmark('subset', qfile, exs, papers=sp, maps=maps, cache_dir=cache, force=True)
        units, iq, info = import_beir(exs, cache_dir=cache, content='image')
        theirs = evaluate_units(units, iq, ocr_rets[0], cache_dir=cache)
        mine = full[('sub', 'page', 'pages', ocr_rets[0])]
        pq_m, pq_t = ({r['query_id']: r['ndcg@10'] for r in x.per_query} for x in (mine, theirs))
        R['roundtrip'][f'pages|{ocr_rets[0]}'] = {'docbench': summary(mine), 'reimported': summary(theirs), 'n_queries': len(pq_t),
                                                  'identical_per_query': pq_m == pq_t}
        log('round trip pages|ocr: identical per query:', pq_m == pq_t)
    R['seconds'] = round(time.time() - t0, 1)
    json.dump(R, open(out / 'eval.json', 'w'), indent=1)
    (out / 'eval.md').write_text(markdown(R))
    log('wrote', out / 'eval.json', out / 'eval.md')


def markdown(R) -> str:
    f = lambda v: '' if v is None else f'{v:.3f}'
    pq = R['page_qrels']
    L = ['# Paper-level vs page-level retrieval (dev queries)', '',
         f"Command: `OMP_NUM_THREADS=1 python bench/pages_eval.py` (arguments in `eval.json`) — {R['n_papers']} shared papers, {R['n_pages']} rendered pages "
         f"(page maps: {R['map_methods']}, {len(R['map_errors'])} errors), {R['seconds']:.0f} s.", '',
         '## Page-level qrels', '',
         f"{pq['level0_placed']} of {pq['level0_queries']} level-0 dev queries placed on a page "
         f"({pq['pages_per_query']} pages per placed query); mapping methods over all levels: {pq['methods_all_levels']}.", '',
         '| evidence | queries | placed |', '|---|---|---|']
    L += [f"| {t} | {v['queries']} | {v['placed']} |" for t, v in pq['by_type'].items()]
    if pq['unplaced_level0']:
        L += ['', 'Unplaced (paper-level qrels only):', ''] + [f"- `{k}`: {v}" for k, v in sorted(pq['unplaced_level0'].items())]
    L += ['', '## nDCG@10, level 0, on the placed queries', '',
          'Paper task: documents are papers; page task: documents are rendered pages (`PAPER#pN`), text chunks max-pooled '
          'to every page they touch, `page-latex` one unit per page. Both on the same (placed) queries; '
          '"all" is the paper task over every level-0 query.', '',
          '| corpus | representation | retriever | task | docs | units | nDCG@10 | text | table | figure | R@10 | n | paper task, all queries |',
          '|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    for r in R['rows']:
        o = r['on_placed']
        L.append(f"| {r['corpus']} | {r['representation']} | `{r['retriever']}` | {r['task']} | {r['n_docs']} | {r['n_units']} | "
                 f"{f(o['ndcg@10'])} | {f(o['text'])} | {f(o['table'])} | {f(o['figure'])} | {f(o['recall@10'])} | {o['n']} | "
                 + (f"{f(r['all']['ndcg@10'])} (n={r['all']['n']})" if r['task'] == 'paper' else '') + ' |')
    if R['ocr_subset']:
        s = R['ocr_subset']
        L += ['', f"`subset` rows: {s['n_papers']} dev-query papers with few pages, {s['n_pages']} pages in all "
                  f"(budget {s['page_budget']}{', listed with --ocr-papers' if s.get('explicit') else ''}; OCR of every shared page is not affordable on this machine): "
                  + ', '.join(f'`{p}`' for p in s['papers']) + '.']
    rt = R['roundtrip']
    L += ['', '## Export → `datasets` → import → evaluate', '',
          f"Exported: {json.dumps(rt.get('export'))}.", '', f"Rows reloaded by `datasets.load_dataset(DIR, CONFIG, split='test')`: {rt.get('datasets_rows')}.", '',
          '| configuration | docbench page task nDCG@10 | re-imported nDCG@10 | queries (all levels) | identical per query |', '|---|---|---|---|---|']
    for k, v in rt.items():
        if isinstance(v, dict) and 'identical_per_query' in v:
            L.append(f"| {k} | {f(v['docbench']['ndcg@10'])} | {f(v['reimported']['ndcg@10'])} | {v['n_queries']} | {v['identical_per_query']} |")
    return '\n'.join(L) + '\n'


if __name__ == '__main__':
    main()
