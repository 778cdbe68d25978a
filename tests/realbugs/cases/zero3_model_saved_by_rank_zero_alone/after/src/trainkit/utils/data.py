from datasets import load_dataset


def load_datasets(cfg, tokenizer):
    raw = load_dataset("json", data_files=cfg.data_path)["train"]
    tokenized = raw.map(lambda row: tokenizer(row["text"], truncation=True, max_length=cfg.max_len))
    split = tokenized.train_test_split(test_size=cfg.val_fraction, seed=cfg.seed)
    return split["train"], split["test"]
