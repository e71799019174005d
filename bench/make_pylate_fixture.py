"""Write the tiny random ColBERT checkpoint the late-interaction tests load, *with PyLate itself*, and PyLate's own
token vectors and MaxSim scores for it, so docbench's ColBERT path is checked against PyLate without PyLate in CI.

Run in an environment that has `pylate` (it pins sentence-transformers 5.3 / transformers <= 5.3, so a separate venv):

    python -m venv /tmp/plvenv && /tmp/plvenv/bin/pip install torch==2.13.0 sentence-transformers==5.3.0 \\
        transformers==5.3.0 ujson pandas accelerate datasets && /tmp/plvenv/bin/pip install --no-deps pylate==1.6.0
    /tmp/plvenv/bin/python bench/make_pylate_fixture.py --tokenizer PATH_TO_MINILM_FOLDER

Writes tests/fixtures/tiny-colbert/ (a random 1-layer BERT, hidden 16, with PyLate's 16 -> 8 projection, [Q]/[D]
markers, query length 12 with expansion) and tests/fixtures/tiny-colbert-ref.npz."""
import argparse, json, sys
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOCS = ['Late interaction keeps one vector per token; MaxSim sums, over query tokens, the best document token.',
        'The glacier lost mass (about 1.2 m w.e. per year), mostly in summer!',
        'Short.',
        'Table 3: nDCG@10 of BM25, dense and hybrid retrieval -- hybrid wins on text, ties on tables.',
        'A much longer passage ' + 'with many repeated words, commas, and periods. ' * 12]
QUERIES = ['which retrieval method wins on tables?', 'glacier mass loss per year', 'MaxSim?']

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--tokenizer', required=True, help='a BERT WordPiece tokenizer folder (the bundled MiniLM)')
    ap.add_argument('--out', default=str(ROOT / 'tests' / 'fixtures'))
    a = ap.parse_args(argv)
    import torch, pylate
    from pylate import models
    from transformers import AutoTokenizer, BertConfig, BertModel
    out = Path(a.out); base, ckpt = out / 'tiny-bert-base', out / 'tiny-colbert'
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=64)).save_pretrained(base)
    tok.save_pretrained(base)
    m = models.ColBERT(model_name_or_path=str(base), embedding_size=8, query_length=12, document_length=40, device='cpu')
    m.save(str(ckpt))
    import shutil; shutil.rmtree(base)
    m = models.ColBERT(model_name_or_path=str(ckpt), device='cpu')          # as a user loads it
    d = m.encode(DOCS, is_query=False, batch_size=2)
    q = m.encode(QUERIES, is_query=True, batch_size=2)
    from pylate import scores
    s = np.array([[float(scores.colbert_scores(torch.as_tensor(qq)[None], torch.as_tensor(dd)[None])[0, 0]) for dd in d]
                  for qq in q], dtype=np.float32)                      # PyLate's own MaxSim, one pair at a time
    np.savez(out / 'tiny-colbert-ref.npz', scores=s, pylate_version=pylate.__version__,
             texts=json.dumps({'docs': DOCS, 'queries': QUERIES}),
             **{f'doc{i}': np.asarray(x, dtype=np.float32) for i, x in enumerate(d)},
             **{f'query{i}': np.asarray(x, dtype=np.float32) for i, x in enumerate(q)})
    print('docs', [np.asarray(x).shape for x in d], 'queries', [np.asarray(x).shape for x in q], 'scores', s.round(3).tolist())
    return 0

if __name__ == '__main__': sys.exit(main())
