#!/usr/bin/python3
# How long a long prompt holds a running stream (chunked prefill, docs/SERVER.md "Scheduling"),
# against a running `kvtier serve`: a stream decodes; once it has produced --warm tokens, a
# --long-token prompt (random ids, so nothing of it is cached) is sent on another connection. Prints,
# as JSON, the stream's largest gap between two tokens while the long prompt was being computed,
# its median gap before, and the long prompt's time to its first token.
# usage: bench/stream_stall.py [--url http://127.0.0.1:PORT] [--long 8000] [--repeats 3]
import argparse, json, random, statistics, threading, time, urllib.request


def post(url, body):
    return urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(),
                                                         {"Content-Type": "application/json"}), timeout=600)


def one_run(args, seed):
    url = args.url + "/v1/completions"
    rng = random.Random(seed)
    long_prompt = [rng.randrange(100, args.vocab) for _ in range(args.long)]
    stamps, sent, answered = [], [None], [None]

    def send_long():
        sent[0] = time.monotonic()
        with post(url, {"prompt": long_prompt, "max_tokens": 1, "stream": True}) as r:
            for line in r:
                if line.startswith(b"data: ") and answered[0] is None:
                    answered[0] = time.monotonic()

    stream_prompt = [rng.randrange(100, args.vocab) for _ in range(16)]
    # logprobs: an event per token, even where its text is held back (a byte of a character)
    body = {"prompt": stream_prompt, "max_tokens": args.stream_tokens, "ignore_eos": True, "stream": True,
            "logprobs": 0}
    sender = None
    with post(url, body) as r:
        for line in r:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            stamps.append(time.monotonic())
            if len(stamps) == args.warm:
                sender = threading.Thread(target=send_long)
                sender.start()
            if sender is not None and answered[0] is not None and len(stamps) > args.warm + 8:
                break  # the stream ran on past the long prompt's first token
    sender.join()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    before = gaps[1:args.warm - 1]
    during = [b - a for a, b in zip(stamps, stamps[1:]) if b >= sent[0] and a <= answered[0]]
    return {"max_gap_s": max(during) if during else None, "median_gap_before_s": statistics.median(before),
            "long_ttft_s": answered[0] - sent[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:18099")
    ap.add_argument("--long", type=int, default=8000, help="tokens of the long prompt")
    ap.add_argument("--vocab", type=int, default=32000, help="ids are drawn from [100, vocab)")
    ap.add_argument("--warm", type=int, default=24, help="stream tokens before the long prompt is sent")
    ap.add_argument("--stream-tokens", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    runs = [one_run(args, seed) for seed in range(args.repeats)]
    med = lambda k: statistics.median(r[k] for r in runs)
    print(json.dumps({"runs": runs, "median_max_gap_s": med("max_gap_s"),
                      "median_gap_before_s": med("median_gap_before_s"), "median_long_ttft_s": med("long_ttft_s")}))


if __name__ == "__main__":
    main()
