# First-token agreement and |Δ logprob| of kvtier's engine against llama.cpp on the same file
# (docs/PERF.md "Quantized engine"): 20 prompts of 64 random token ids, greedy, one token, sent to
# llama-server (port 8091, /completion with n_probs) and kvtier serve (port 8092,
# /v1/completions with logprobs); tokens compared by their text. Start both servers first:
#   llama-server -m FILE -t 2 -c 4096 --port 8091
#   build/tools/kvtier serve --model FILE --kv-dtype f32 --threads 2 --port 8092
import json, random, urllib.request, math
def post(url, body):
    r = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=120))
random.seed(7)
agree = 0; dl = []; n = 0
for p in range(20):
    toks = [random.randrange(1000, 100000) for _ in range(64)]
    a = post("http://127.0.0.1:8091/completion", {"prompt": toks, "n_predict": 1, "n_probs": 5, "temperature": 0, "cache_prompt": False, "post_sampling_probs": False})
    top = a["completion_probabilities"][0]
    l_id = top["id"]; l_lp = top["logprob"]
    b = post("http://127.0.0.1:8092/v1/completions", {"prompt": toks, "max_tokens": 1, "temperature": 0, "logprobs": 5, "return_tokens_as_token_ids": True})
    ch = b["choices"][0]
    lp = ch.get("logprobs") or {}
    k_lp = lp.get("token_logprobs", [None])[0]
    k_tok = lp.get("tokens", [None])[0]
    l_tok = top["token"]
    n += 1; agree += (k_tok == l_tok)
    if k_tok == l_tok: dl.append(abs(k_lp - l_lp))
print(f"prompts {n}, first-token agreement {agree}/{n}, |dlogprob| of the agreed top token: median {sorted(dl)[len(dl)//2] if dl else float('nan'):.4f} max {max(dl) if dl else float('nan'):.4f}")
