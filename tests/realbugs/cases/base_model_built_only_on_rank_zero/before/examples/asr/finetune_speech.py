import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import OmegaConf

from speechkit.models import SpeechModel


@rank_zero_only
def load_base_model(cfg):
    """The model to fine-tune: from a local archive or by its published name."""
    archive = cfg.get("from_archive", None)
    name = cfg.get("from_name", None)
    if (archive is None) == (name is None):
        raise ValueError("give exactly one of from_archive or from_name")
    if archive is not None:
        return SpeechModel.restore(archive)
    return SpeechModel.download(name)


def main(cfg):
    print(OmegaConf.to_yaml(cfg))
    trainer = pl.Trainer(**cfg.trainer)
    model = load_base_model(cfg)
    model.setup_optimization(cfg.model.optim)
    trainer.fit(model)


if __name__ == "__main__":
    main(OmegaConf.load("finetune.yaml"))
