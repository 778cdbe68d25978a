import os

import torch.distributed as dist
from transformers import AutoModelForCausalLM


def node_rank_local():
    return int(os.environ.get("LOCAL_RANK", 0))


class CausalLMWrapper:
    def __init__(self, model_cfg, trust_remote_code=True):
        name_or_path = model_cfg["name_or_path"]
        pretrained = model_cfg.get("pretrained", True)
        if node_rank_local() != 0 and model_cfg.get("init_device") == "mixed":
            pretrained = False
        if node_rank_local() == 0 and os.path.isdir(name_or_path):
            AutoModelForCausalLM.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        dist.barrier()
        if pretrained:
            self.model = AutoModelForCausalLM.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        else:
            self.model = AutoModelForCausalLM.from_config(model_cfg["config"], trust_remote_code=trust_remote_code)
        dist.barrier()
