import time

import lightning.pytorch as pl
from omegaconf import OmegaConf

from speechkit.models import SpeechModel
from speechkit.ranks import is_global_rank_zero


def load_base_model(trainer, cfg):
    """The model to fine-tune: from a local archive or by its published name."""
    archive = cfg.get("from_archive", None)
    name = cfg.get("from_name", None)
    if (archive is None) == (name is None):
        raise ValueError("give exactly one of from_archive or from_name")
    if archive is not None:
        return SpeechModel.restore(archive)
    ranks = trainer.num_devices * trainer.num_nodes
    if ranks > 1 and not is_global_rank_zero():
        # let rank zero fetch it first, then read it from the cache
        time.sleep(max(int(cfg.get("download_wait", 60)), 60))
    return SpeechModel.download(name)


def main(cfg):
    print(OmegaConf.to_yaml(cfg))
    trainer = pl.Trainer(**cfg.trainer)
    model = load_base_model(trainer, cfg)
    model.setup_optimization(cfg.model.optim)
    trainer.fit(model)


if __name__ == "__main__":
    main(OmegaConf.load("finetune.yaml"))
