#!/usr/bin/env python3
"""Generate tests/data/recall_set.json: a small labelled recall set (deterministic).

Each of TOPICS topics has a few rare words of its own and a two-word key phrase whose
words are common across the corpus (they also appear, apart, in other topics' entries).
An entry of a topic mentions one of its rare words, its key phrase, or both, among
filler words and three words of the common pool. A query names a topic's key phrase and one of its rare words; the
relevant entries are all entries of that topic.

So the evidence is split: a rare word is what BM25 (idf) finds and cosine similarity
barely notices among the fillers; the phrase is what the hashing embedder's bigram
features find and BM25 cannot tell from its two common words scattered elsewhere. Hybrid
recall should need both. Run: python3 tests/data/gen_recall_set.py > tests/data/recall_set.json
"""
import json
import random

SEED = 20240611
TOPICS = 48
PER_TOPIC = 8
QUERIES = 48

rng = random.Random(SEED)

syllables = ["ka", "zo", "mi", "tru", "vex", "lo", "qui", "bar", "ne", "dax", "ul", "fen", "gri", "op", "sy", "wex"]


def rare_word(used):
    while True:
        w = "".join(rng.choice(syllables) for _ in range(3))
        if w not in used:
            used.add(w)
            return w


common = [
    "release", "storage", "review", "budget", "customer", "server", "pipeline", "meeting", "deadline", "report",
    "team", "account", "network", "schedule", "database", "contract", "invoice", "office", "traffic", "backup",
    "policy", "ticket", "migration", "dashboard", "vendor", "cluster", "training", "hiring", "launch", "metric",
]
fillers = [
    "weekly", "update", "project", "status", "notes", "plan", "issue", "owner", "priority", "discussion",
    "follow", "call", "email", "summary", "detail", "agreed", "pending", "shared", "draft", "final",
    "morning", "quarter", "north", "central", "manual", "quick", "large", "minor", "regular", "extra",
]

used = set(common) | set(fillers)
topics = []
phrases = set()
for t in range(TOPICS):
    while True:
        a, b = rng.sample(common, 2)
        if (a, b) not in phrases:
            phrases.add((a, b))
            break
    topics.append({"rare": [rare_word(used) for _ in range(4)], "phrase": [a, b]})


def sentence(words):
    return " ".join(words)


entries = []
for t, topic in enumerate(topics):
    for j in range(PER_TOPIC):
        kind = ["rare", "phrase", "both"][j % 3]
        words = rng.sample(fillers, rng.randint(4, 7))
        # Words of the common pool, apart: they make phrase words non-discriminative.
        words += rng.sample(common, 3)
        if kind in ("rare", "both"):
            words += rng.sample(topic["rare"], 1)
        rng.shuffle(words)
        if kind in ("phrase", "both"):
            at = rng.randint(0, len(words))
            words[at:at] = topic["phrase"]
        entries.append({"id": f"t{t:02d}-{j}", "text": sentence(words), "topic": t})

rng.shuffle(entries)
queries = []
for q in range(QUERIES):
    t = q % TOPICS
    topic = topics[t]
    # Function words around the terms, as a person would ask (both scorers drop them).
    text = "what is the {} {} of {}".format(topic["phrase"][0], topic["phrase"][1], rng.choice(topic["rare"]))
    relevant = sorted(e["id"] for e in entries if e["topic"] == t)
    queries.append({"query": text, "relevant": relevant})

print(json.dumps({"seed": SEED, "entries": [{"id": e["id"], "text": e["text"]} for e in entries],
                  "queries": queries}, indent=1))
