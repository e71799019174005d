"""Ray engine against the local engine, stage by stage: rendered pages read by OCR on the page task (dense over the OCR
text), late interaction over text, and a ColQwen2-style image encoder over figures (tiny random weights: the
equivalence, not the quality, is measured), each run on a local Ray instance and again locally in a separate cold cache.
Records Ray's counts, what the driver's local pass wrote to the cache (`driver_work`: only the index is expected),
per-query equality and wall times.

    python bench/ray_equivalence.py [--papers 6] [--out results/ray]
"""
import argparse, json, shutil, sys, tempfile, time
from pathlib import Path
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.evaluation.core import evaluate
from docbench_nb.evaluation import ray_engine
from docbench_nb.testing import make_tiny_vision_models

ap = argparse.ArgumentParser()
ap.add_argument('--papers', type=int, default=6); ap.add_argument('--out', default='results/ray'); ap.add_argument('--cpus', type=int, default=2)
a = ap.parse_args()
work = Path(tempfile.mkdtemp(prefix='ray-eq-'))
ids = sorted(p.name for p in demo_corpus_dir().iterdir() if p.is_dir())[:a.papers]
corpus = work / 'papers'; corpus.mkdir()
for i in ids: shutil.copytree(demo_corpus_dir() / i, corpus / i)
q = work / 'q.jsonl'; q.write_text(''.join(l for l in open(demo_queries_path()) if json.loads(l)['doc_id'] in ids))
tiny = make_tiny_vision_models(work / 'models')
CONFIGS = [('pages', 'ocr:tesseract+dense', dict(task='page')),
           ('text', 'late', {}),
           ('figures', f"colpali:{tiny['colqwen2']}", dict(max_pixels=28 * 28 * 16))]
started = ray_engine.start_ray(num_cpus=a.cpus)
rows = []
try:
    for rep, spec, kw in CONFIGS:
        t = time.time()
        r = ray_engine.evaluate_ray(corpus, q, rep, spec, cache_dir=work / f'ray-{rep}', progress=False, log=lambda m: None, **kw)
        t_ray = time.time() - t; t = time.time()
        l = evaluate(corpus, q, rep, spec, cache_dir=work / f'local-{rep}', progress=False, **kw)
        t_local = time.time() - t
        pq = all(x['query_id'] == y['query_id'] and abs(x['ndcg@10'] - y['ndcg@10']) < 1e-9 for x, y in zip(r.per_query, l.per_query))
        rank = all(r.run.ranking(qid) == l.run.ranking(qid) for qid in l.run.scores)
        gap = max((abs(r.run.scores[qid][d] - s) for qid in l.run.scores for d, s in l.run.scores[qid].items()), default=0.0)
        eng = r.config['engine']
        rows.append(dict(representation=rep, retriever='colpali:<tiny ColQwen2>' if spec.startswith('colpali') else spec, task=kw.get('task', 'paper'),
                         papers=len(ids), units=r.n_units, docs=r.n_docs, queries=r.n_queries, ndcg10_ray=r.overall['ndcg@10'],
                         ndcg10_local=l.overall['ndcg@10'], per_query_equal=pq, rankings_equal=rank, max_score_gap=gap,
                         ray_units=eng['prefill']['units'], ray_encoded=eng['prefill']['encoded'], driver_work=eng['driver_work'],
                         ray_wall_s=round(t_ray, 1), local_wall_s=round(t_local, 1)))
        print(json.dumps(rows[-1]), flush=True)
finally:
    if started:
        import ray; ray.shutdown()
out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
(out / 'ray_equivalence.json').write_text(json.dumps(rows, indent=1))
md = ['| representation | retriever | task | units | queries | nDCG@10 Ray | nDCG@10 local | per query equal | rankings equal | max score gap | encoded by actors | driver wrote | Ray s | local s |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
for r in rows:
    md.append(f"| {r['representation']} | {r['retriever']} | {r['task']} | {r['units']} | {r['queries']} | {r['ndcg10_ray']:.4f} | {r['ndcg10_local']:.4f} | "
              f"{r['per_query_equal']} | {r['rankings_equal']} | {r['max_score_gap']:.1e} | {r['ray_encoded']} | "
              f"{', '.join(f'{k}: {v}' for k, v in r['driver_work'].items()) or 'nothing'} | {r['ray_wall_s']} | {r['local_wall_s']} |")
(out / 'ray_equivalence.md').write_text('\n'.join(md) + '\n')
print('\n'.join(md))
shutil.rmtree(work, ignore_errors=True)
