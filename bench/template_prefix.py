#!/usr/bin/python3
"""For each chat template in tests/data/chat-templates: is the rendering of
turn n (with add_generation_prompt) plus the assistant's reply a prefix of the
rendering of turn n+1? Prints, per template, the share of turn n's prompt+reply
text that turn n+1's rendering starts with (1.0: a prefix cache can reuse all
of it). Rendered with Debian's python3-jinja2 configured as Hugging Face does.
usage: bench/template_prefix.py [templates-dir]"""
import datetime, glob, os, sys
import jinja2, jinja2.ext

BOS = {"Qwen": "", "meta-llama": "<|begin_of_text|>", "deepseek": "<｜begin▁of▁sentence｜>", "NousResearch": "<|begin_of_text|>",
       "google": "<bos>", "mistralai": "<s>"}
EOS = {"Qwen": "<|im_end|>", "meta-llama": "<|eot_id|>", "deepseek": "<｜end▁of▁sentence｜>", "NousResearch": "<|im_end|>",
       "google": "<eos>", "mistralai": "</s>"}


def env():
    e = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    def raise_exception(m):
        raise RuntimeError(m)
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = lambda f: datetime.datetime(2024, 7, 26).strftime(f)
    return e


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "chat-templates")
    for path in sorted(glob.glob(os.path.join(folder, "*.jinja"))):
        name = os.path.basename(path)
        family = next(k for k in BOS if name.startswith(k))
        tmpl = env().from_string(open(path, encoding="utf-8").read())
        for with_system in (True, False):
            try:
                shares = measure(tmpl, family, with_system)
                note = "" if with_system else "  (no system message: the template refuses one)"
                print("%-55s %s%s" % (name, " ".join("%.3f" % s for s in shares), note))
                break
            except RuntimeError as e:
                if not with_system:
                    print("%-55s raises: %s" % (name, e))


def measure(tmpl, family, with_system):
    msgs = [{"role": "system", "content": "You are a helpful assistant. " * 8}] if with_system else []
    shares = []
    for turn in range(3):
        msgs.append({"role": "user", "content": "Question %d: how does the tiered cache work? " % turn * 4})
        prompt = tmpl.render(messages=msgs, add_generation_prompt=True, bos_token=BOS[family], eos_token=EOS[family])
        reply = "It keeps prefixes and loads them back, turn %d." % turn
        msgs.append({"role": "assistant", "content": reply})
        nxt = tmpl.render(messages=msgs + [{"role": "user", "content": "Next?"}], add_generation_prompt=True,
                          bos_token=BOS[family], eos_token=EOS[family])
        full = prompt + reply
        shares.append(len(os.path.commonprefix([full, nxt])) / len(full))
    return shares


if __name__ == "__main__":
    main()
