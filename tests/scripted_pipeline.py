"""A scripted chat model for the query pipeline's tests (served by `docbench_nb.testing.ScriptedChatServer`): valid JSON for
each prompt, found by a phrase of the system text that no domain or language changes, with a fixed token usage."""
import json
from docbench_nb.queries.llm_stages import fenced_text

USAGE = {'prompt_tokens': 50, 'completion_tokens': 10, 'total_tokens': 60}


def reply(req):
    sys_, user = req['messages'][0]['content'], req['messages'][-1]['content']
    q = fenced_text(user, 'QUESTION') or ''
    if 'You write search questions' in sys_:
        words = [w for w in (fenced_text(user, 'EVIDENCE') or '').split() if w.isalpha() and len(w) > 6][:3]
        a = {'question': f"Which study of {' and '.join(words)} reports glowing ferns?", 'answer': 'that one'}
    elif 'stand on their own' in sys_ or 'search engine' in sys_: a = {'query': q}
    elif 'You check' in sys_: a = {'valid': True, 'labels': []}
    elif 'You rephrase' in sys_: a = {'rephrasing': f"Level {1 + ('new wording' in user) + ('Restructure' in user)} of: {q}"}
    elif 'You compare two questions' in sys_: a = {'same_meaning': True, 'same_answer': True}
    elif 'judge whether a passage' in sys_: a = {'answers': False}
    elif 'You answer questions' in sys_: a = {'answer': 'that one'}        # the answer check's blind reader
    elif 'You compare two answers' in sys_: a = {'match': True}
    else: a = {'unexpected': True}                 # no schema accepts it: a prompt the script does not know fails loudly
    return {'content': json.dumps(a), 'usage': dict(USAGE)}
