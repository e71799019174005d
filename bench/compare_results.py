"""Paired randomization test between saved result JSONs (per-query nDCG@10 at one rephrasing level).

    python bench/compare_results.py results/representations/pages__ocr_tesseract_dense__512__1000000.json \
        results/representations/text__dense__256.json [A2.json B2.json ...] [--level 0] [--metric ndcg@10]

Arguments come in pairs (A B); for each pair it prints mean(A - B) and the two-sided p-value of
`docbench_nb.evaluation.metrics.paired_randomization_test` (10,000 resamples). A query missing from one run scores 0 there.
"""
import argparse, json
from docbench_nb.evaluation.metrics import paired_randomization_test

def per_query(path, level, metric):
    d = json.load(open(path))
    return {r['query_id']: r[metric] for r in d['per_query'] if r['level'] == level}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('results', nargs='+'); ap.add_argument('--level', type=int, default=0)
    ap.add_argument('--metric', default='ndcg@10')
    a = ap.parse_args()
    if len(a.results) % 2: ap.error('results must come in pairs: A B [A2 B2 ...]')
    for fa, fb in zip(a.results[::2], a.results[1::2]):
        A, B = per_query(fa, a.level, a.metric), per_query(fb, a.level, a.metric)
        for q in set(A) | set(B): A.setdefault(q, 0.0); B.setdefault(q, 0.0)
        r = paired_randomization_test(A, B)
        print(f"{fa.split('/')[-1]} vs {fb.split('/')[-1]}: n={len(A)} mean diff {r['mean_diff']:+.4f}  p={r['p_value']:.4f}")

if __name__ == '__main__': main()
