import os

import nltk

NODE_RANK = os.environ.get("LOCAL_RANK", "0")


def ensure_tokenizer():
    try:
        nltk.data.find("tokenizers/punkt_tab")
    except LookupError:
        if NODE_RANK == "0":
            nltk.download("punkt_tab")


ensure_tokenizer()


def split_sentences(text):
    return nltk.sent_tokenize(text)
