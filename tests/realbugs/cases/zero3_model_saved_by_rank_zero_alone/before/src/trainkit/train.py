import logging

import torch
from transformers import Trainer

from trainkit.utils.models import load_model_and_tokenizer
from trainkit.utils.data import load_datasets

LOG = logging.getLogger(__name__)


def train(cfg, training_args):
    model, tokenizer = load_model_and_tokenizer(cfg)
    train_set, eval_set = load_datasets(cfg, tokenizer)
    trainer = Trainer(model=model, args=training_args, train_dataset=train_set,
                      eval_dataset=eval_set, tokenizer=tokenizer)

    if cfg.use_sdp_flash:
        with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=True):
            trainer.train(resume_from_checkpoint=cfg.resume_from)
    else:
        trainer.train(resume_from_checkpoint=cfg.resume_from)

    LOG.info("training finished, writing the model to %s", cfg.output_dir)

    if trainer.is_fsdp_enabled:
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")

    # one writer only: several processes writing the same files corrupt them
    if cfg.fsdp:
        trainer.save_model(cfg.output_dir)
    elif cfg.local_rank == 0:
        model.save_pretrained(cfg.output_dir, safe_serialization=cfg.safetensors)

    return model, tokenizer
