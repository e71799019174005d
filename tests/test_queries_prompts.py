"""Prompts from a folder, with domain and language, through the CLI against a loopback chat server: what is sent is what
the folder says, a folder lacking a template the build needs is refused by name before any call, and stage keys hash
the prompt text (an edited prompt is asked again on resume; the stages before it are reused)."""
import json, shutil
import pytest

from docbench_nb.cli import main
from docbench_nb.demo import demo_corpus_dir
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
