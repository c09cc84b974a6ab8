#!/usr/bin/python3
# Four chat turns against a running `kvtier serve`; prints, per turn, the cached
# tokens over the previous turn's prompt plus reply (docs/PERF.md, issue 17).
# usage: bench/chat_turns.py [http://127.0.0.1:PORT]
import json, urllib.request
import sys
url = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:18098") + "/v1/chat/completions"
sysmsg = " ".join(["The cache keeps every prefix that a request has seen and loads it back."] * 20)
msgs = [{"role": "system", "content": sysmsg}]
prev = None
for turn in range(4):
    msgs.append({"role": "user", "content": " ".join(["Please explain turn %d of this long conversation about caches." % turn] * 6)})
    body = json.dumps({"messages": msgs, "max_tokens": 24, "ignore_eos": True}).encode()
    r = json.load(urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"})))
    u = r["usage"]
    reply = r["choices"][0]["message"]["content"]
    cached = u["prompt_tokens_details"]["cached_tokens"]
    if prev: print("turn", turn, "prompt", u["prompt_tokens"], "cached", cached, "of prev prompt+reply", prev, "ratio %.3f" % (cached / prev))
    else: print("turn", turn, "prompt", u["prompt_tokens"], "cached", cached)
    prev = u["prompt_tokens"] + u["completion_tokens"]
    msgs.append({"role": "assistant", "content": reply})
