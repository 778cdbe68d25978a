from transformers import AutoModelForCausalLM, AutoTokenizer


def load_model_and_tokenizer(cfg):
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model)
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model, torch_dtype="auto")
    return model, tokenizer
