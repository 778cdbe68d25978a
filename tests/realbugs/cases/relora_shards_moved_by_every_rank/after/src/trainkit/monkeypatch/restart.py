import glob
import logging
import os
import shutil

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from trainkit.utils.distributed import is_main_process

LOG = logging.getLogger(__name__)


class PeriodicMergeCallback(TrainerCallback):
    """Merges the adapter into the base weights every `merge_every` steps."""

    def __init__(self, cfg):
        self.merge_every = cfg.merge_every
        self.quantized = cfg.load_in_4bit
        self.last_merged_dir = cfg.base_model_dir

    def on_train_begin(self, args, state, control, **kwargs):
        if is_main_process():
            os.makedirs(os.path.join(args.output_dir, "merged"), exist_ok=True)
        return control

    def on_save(self, args, state, control, model=None, **kwargs):
        target = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}", "merged")
        if state.global_step >= self.merge_every and state.global_step % self.merge_every != 0:
            if self.quantized:
                if is_main_process() and self.last_merged_dir != target:
                    # keep the newest full weights inside the newest checkpoint so pruning keeps them
                    LOG.info("relocating merged weights to %s", target)
                    os.makedirs(target, exist_ok=True)
                    shards = glob.glob(f"{self.last_merged_dir}/model*.safetensors")
                    shards += glob.glob(f"{self.last_merged_dir}/model*.index.json")
                    for shard in shards:
                        moved = os.path.abspath(shutil.move(shard, target))
                        try:
                            os.symlink(moved, shard)
                        except OSError:
                            pass
                    self.last_merged_dir = target
            else:
                model.model.save_pretrained(target, safe_serialization=True)
        return control
