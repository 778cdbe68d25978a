import nltk


def ensure_tokenizer():
    try:
        nltk.data.find("tokenizers/punkt_tab")
    except LookupError:
        nltk.download("punkt_tab")


ensure_tokenizer()


def split_sentences(text):
    return nltk.sent_tokenize(text)
