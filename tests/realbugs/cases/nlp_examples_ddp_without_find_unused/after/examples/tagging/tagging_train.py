import hydra
import lightning.pytorch as pl
from omegaconf import DictConfig

from nlpkit.models import TaggerModel


@hydra.main(config_path="conf", config_name="tagging_config", version_base=None)
def main(cfg: DictConfig) -> None:
    pl.seed_everything(42)
    # the model leaves some parameters without gradients; plain DDP would fail on them
    if cfg.trainer.strategy == "ddp":
        cfg.trainer.strategy = "ddp_find_unused_parameters_true"
    trainer = pl.Trainer(**cfg.trainer)
    model = TaggerModel(cfg.model, trainer=trainer)
    trainer.fit(model)


if __name__ == "__main__":
    main()
